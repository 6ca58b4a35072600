// Package useragent names a worker process in the User-Agent header of its
// requests to a provider: "tgnotify-<daemon> (pid <pid>)". A provider's
// log then tells which program called it, and the chaos harness, which
// kills workers, matches each 429 to the process that sent the request it
// answered, and each request sent inside a pause to its sender (Pid).
package useragent

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Of is the User-Agent of the daemon (telegram-worker, max-worker, ...)
// running as process pid.
func Of(daemon string, pid int) string { return prefix(daemon) + strconv.Itoa(pid) + ")" }

// Pid returns the process id that Of(daemon, pid) put in ua, and false when
// ua is not daemon's.
func Pid(ua, daemon string) (int, bool) {
	rest, ok := strings.CutPrefix(ua, prefix(daemon))
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, ")")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(digits)
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

func prefix(daemon string) string { return "tgnotify-" + daemon + " (pid " }

// Check reports what is wrong with ua as a User-Agent header value set by
// a client option: it must be non-empty printable ASCII.
func Check(ua string) error {
	if ua == "" {
		return errors.New("empty User-Agent")
	}
	for i := 0; i < len(ua); i++ {
		if ua[i] < ' ' || ua[i] > '~' {
			return fmt.Errorf("byte %d of the User-Agent is not printable ASCII", i)
		}
	}
	return nil
}
