package telegram

import (
	"fmt"
	"strconv"
	"strings"
)

// userAgentPrefix starts the User-Agent of the telegram worker's requests.
const userAgentPrefix = "tgnotify-telegram-worker (pid "

// UserAgent is the User-Agent header of the telegram worker with process id
// pid. Telegram sees which program calls it; the chaos harness, which kills
// workers, matches each 429 to the process that sent the request it
// answered (PidOfUserAgent).
func UserAgent(pid int) string { return fmt.Sprintf("%s%d)", userAgentPrefix, pid) }

// PidOfUserAgent returns the process id that UserAgent put in ua, and false
// when ua is not a telegram worker's.
func PidOfUserAgent(ua string) (int, bool) {
	rest, ok := strings.CutPrefix(ua, userAgentPrefix)
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
