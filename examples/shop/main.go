// Command shop is the example application: an order API that writes each
// order and its Telegram notification into one SQLite transaction through the
// outbox. It never calls Telegram itself.
//
//	shop -db shop.db -http 127.0.0.1:8080
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/oklog/run"
	"github.com/peterbourgon/ff/v3"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

var version = "dev"

func main() {
	if err := runMain(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(exitCode(err))
	}
}

type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

func runMain(args []string) error {
	fs := flag.NewFlagSet("shop", flag.ContinueOnError)
	var (
		dbPath       = fs.String("db", "shop.db", "path of the SQLite database holding orders and the outbox")
		httpAddr     = fs.String("http", "127.0.0.1:8080", "address of the order API")
		logLevel     = fs.String("log-level", "info", "log level: debug, info, warn or error")
		showVersion  = fs.Bool("version", false, "print the version and exit")
		readTimeout  = fs.Duration("read-timeout", 10*time.Second, "maximum time to read a whole request")
		writeTimeout = fs.Duration("write-timeout", 10*time.Second, "maximum time to write a response")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: shop [flags]\n\nThe example order API. Every flag can also be set as SHOP_<FLAG> (dashes become underscores).\n\n")
		fs.PrintDefaults()
	}
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix("SHOP")); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if *showVersion {
		fmt.Println(version)
		return nil
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageError{fmt.Errorf("-log-level: %w", err)}
	}
	if *readTimeout <= 0 || *writeTimeout <= 0 {
		return usageError{errors.New("-read-timeout and -write-timeout must be positive")}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("component", "shop")

	ctx := context.Background()
	db, err := outbox.Open(ctx, *dbPath, outbox.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	svc, err := shop.NewService(ctx, db)
	if err != nil {
		return err
	}
	defer svc.Close()
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return usageError{fmt.Errorf("-http %s: %w", *httpAddr, err)}
	}
	srv := &http.Server{
		Handler:           shop.NewHandler(svc, log),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       *readTimeout,
		WriteTimeout:      *writeTimeout,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	var g run.Group
	g.Add(run.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))
	g.Add(func() error {
		log.Info("shop listening", "addr", ln.Addr().String(), "db", *dbPath, "version", version)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, func(error) {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	err = g.Run()
	// errors.Is, not errors.As: run.SignalError's As reports a match
	// without filling the target, so its Signal would be nil.
	if errors.Is(err, run.ErrSignal) {
		log.Info("shop stopped", "reason", err.Error())
		return nil
	}
	return err
}
