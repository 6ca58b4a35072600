package emulator

import "github.com/tgnotify/tgnotify/internal/emufault"

// FaultMode is what an outage does to the Bot API requests it hits.
type FaultMode = emufault.Mode

// Fault modes.
const (
	// Fault5xx answers with an nginx-style HTML error page (status 502 by
	// default), as Telegram's front end does when the Bot API is down.
	Fault5xx = emufault.Mode5xx
	// FaultJSON5xx answers with the Bot API's JSON envelope, error_code 500
	// by default: {"ok":false,"error_code":500,"description":"Internal Server Error"}.
	FaultJSON5xx = emufault.ModeJSON5xx
	// FaultDrop closes the connection without answering.
	FaultDrop = emufault.ModeDrop
	// FaultSlow adds Outage.Delay before handling the request normally.
	FaultSlow = emufault.ModeSlow
	// FaultBlackhole never answers: it holds the request until the client
	// gives up, the outage ends or the emulator is closed, then closes the
	// connection.
	FaultBlackhole = emufault.ModeBlackhole
	// FaultDeliverDrop handles the request normally and, when a message was
	// delivered, records it (marked ResponseDropped) and closes the
	// connection instead of answering: the "may have been delivered" window.
	// Requests that were not delivered are answered normally.
	FaultDeliverDrop = emufault.ModeDeliverDrop
)

// faults returns how this emulator names its 5xx modes.
func faults() emufault.Kind { return emufault.Kind{JSON5xx: FaultJSON5xx, HTML5xx: Fault5xx} }

// ParseFaultMode checks a fault mode's name.
func ParseFaultMode(s string) (FaultMode, error) { return faults().Parse(s) }

// Outage is a scripted fault: every Bot API request (with Probability, a
// fraction of them) is hit by Mode until Duration has passed on the
// emulator's clock or StopOutage is called. Status is the HTTP status of
// Fault5xx (default 502) and the error_code of FaultJSON5xx (default 500).
type Outage = emufault.Outage
