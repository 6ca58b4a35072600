package emufault

import (
	"fmt"
	"strings"
)

// Mode is what an outage does to the API requests it hits.
type Mode string

// The fault modes. An emulator offers two of the three 5xx names (see
// [Kind]) and every other mode.
const (
	// Mode5xx is the 5xx mode named "5xx": the HTML page on Telegram's
	// and MAX's emulators, the API's JSON error on Twilio's.
	Mode5xx Mode = "5xx"
	// ModeJSON5xx answers with the API's JSON error ("json5xx").
	ModeJSON5xx Mode = "json5xx"
	// ModeHTML5xx answers with a proxy's HTML error page ("html5xx").
	ModeHTML5xx Mode = "html5xx"
	// ModeDrop closes the connection without answering.
	ModeDrop Mode = "drop"
	// ModeSlow adds Outage.Delay before handling the request normally.
	ModeSlow Mode = "slow"
	// ModeBlackhole never answers: it holds the request until the client
	// gives up, the outage ends or the emulator is closed, then closes the
	// connection.
	ModeBlackhole Mode = "blackhole"
	// ModeDeliverDrop handles the request normally and, when it delivered
	// a message, records it (marked as its answer dropped) and closes the
	// connection instead of answering: the "may have been delivered"
	// window.
	ModeDeliverDrop Mode = "deliver-drop"
)

// Kind is how one emulator names its two 5xx modes.
type Kind struct {
	// JSON5xx is the mode that answers with the API's JSON error, status
	// 500 by default.
	JSON5xx Mode
	// HTML5xx is the mode that answers with a proxy's HTML error page,
	// status 502 by default.
	HTML5xx Mode
}

// modes returns the kind's modes, "5xx" first.
func (k Kind) modes() []Mode {
	first, second := k.JSON5xx, k.HTML5xx
	if second == Mode5xx {
		first, second = second, first
	}
	return []Mode{first, second, ModeDrop, ModeSlow, ModeBlackhole, ModeDeliverDrop}
}

// Parse checks a mode's name, in any case and with spaces around it.
func (k Kind) Parse(s string) (Mode, error) {
	m := Mode(strings.ToLower(strings.TrimSpace(s)))
	names := k.modes()
	for _, n := range names {
		if m == n {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown fault mode %q (want %s, %s, %s, %s, %s or %s)", s, names[0], names[1], names[2], names[3], names[4], names[5])
}
