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
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/run"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

var version = "dev"

func main() {
	if err := runMain(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(daemon.ExitCode(err))
	}
}

// Defaults of the shop's flags.
const (
	defaultDB           = "shop.db"
	defaultHTTP         = "127.0.0.1:8080"
	defaultReadTimeout  = 10 * time.Second
	defaultWriteTimeout = 10 * time.Second
	defaultOrderURL     = ""
)

const usage = `Usage: shop [flags]

The example order API. With -nats (or $NATS_URL) it also follows the delivery
pipeline's events (a durable consumer shop-events on notify.events.>): GET
/orders/{id} then says whether and how the order's notification arrived, and a
Telegram chat found dead is left out of the customer's next notifications.
Every flag can also be set as SHOP_<FLAG> (upper case, dashes as underscores)
or in the -config YAML file (keys are flag names); an explicit flag wins over
the environment, which wins over the file.

`

func runMain(args []string) error {
	var (
		dbPath, httpAddr, orderURL string
		readTimeout, writeTimeout  time.Duration
		logFlags                   daemon.LogFlags
		showVersion                bool
		natsOpts                   jetstream.Options
		prefix                     string
	)
	cs := config.New("shop", config.Options{EnvPrefix: "SHOP", ConfigFlag: "config", Usage: usage})
	config.String(cs, &dbPath, "db", defaultDB, "`path` of the SQLite database holding orders and the outbox")
	config.String(cs, &httpAddr, "http", defaultHTTP, "`address` of the order API")
	config.String(cs, &orderURL, "order-url", defaultOrderURL,
		"base `URL` of the shop's order pages (https://shop.example/orders): notifications then carry a button to <URL>/<order id>").
		Check(shop.CheckOrderURL)
	daemon.NATSFlags(cs, &natsOpts)
	config.String(cs, &prefix, jetstream.FlagPrefix, jetstream.DefaultPrefix,
		"subject `prefix` of the pipeline whose events the shop follows (its JetStream declaration's "+jetstream.FlagPrefix+"): notify follows notify.events.> on NOTIFY").
		Check(jetstream.ValidatePrefix)
	logFlags.Register(cs)
	config.Bool(cs, &showVersion, "version", false, "print the version and exit")
	config.Duration(cs, &readTimeout, "read-timeout", defaultReadTimeout, "maximum time to read a whole request").Check(config.Positive)
	config.Duration(cs, &writeTimeout, "write-timeout", defaultWriteTimeout, "maximum time to write a response").Check(config.Positive)
	if err := cs.Parse(args); err != nil {
		return err
	}
	if showVersion {
		fmt.Println(version)
		return nil
	}
	log, err := logFlags.Logger(os.Stderr)
	if err != nil {
		return err
	}
	log = log.With("component", "shop")
	log.Info("configuration", cs.LogAttr())

	ctx := context.Background()
	db, err := outbox.Open(ctx, dbPath, outbox.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	var opts []shop.Option
	if orderURL != "" {
		opts = append(opts, shop.WithOrderURL(orderURL))
	}
	svc, err := shop.NewService(ctx, db, opts...)
	if err != nil {
		return err
	}
	defer svc.Close()
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return daemon.UsageError{Err: fmt.Errorf("-http %s: %w", httpAddr, err)}
	}
	srv := &http.Server{
		Handler:           shop.NewHandler(svc, log),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	var g run.Group
	g.Add(daemon.SignalHandler(ctx))
	if natsOpts.URLs != "" {
		natsOpts.Name = "shop"
		nc, err := jetstream.Connect(ctx, natsOpts, log)
		if err != nil {
			return daemon.UsageError{Err: err}
		}
		defer nc.Close()
		js, err := natsjs.New(nc)
		if err != nil {
			return err
		}
		names, err := jetstream.NewNames(prefix)
		if err != nil {
			return daemon.UsageError{Err: err}
		}
		events := shop.NewEvents(svc, js, names, log)
		ectx, stop := context.WithCancel(ctx)
		g.Add(func() error { return events.Run(ectx) }, func(error) { stop() })
	}
	g.Add(func() error {
		log.Info("shop listening", "addr", ln.Addr().String(), "db", dbPath, "version", version)
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
