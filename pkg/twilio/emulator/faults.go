package emulator

import "github.com/tgnotify/tgnotify/internal/emufault"

// FaultMode is what an outage does to the API requests it hits.
type FaultMode = emufault.Mode

// Fault modes.
const (
	// Fault5xx answers with Twilio's JSON error, status 500 by default:
	// {"code":20500,"message":"Internal Server Error",...} (20503 for 503).
	Fault5xx = emufault.Mode5xx
	// FaultHTML5xx answers with a proxy's HTML error page, status 502 by
	// default.
	FaultHTML5xx = emufault.ModeHTML5xx
	// FaultDrop closes the connection without answering.
	FaultDrop = emufault.ModeDrop
	// FaultSlow adds Outage.Delay before handling the request normally.
	FaultSlow = emufault.ModeSlow
	// FaultBlackhole never answers: it holds the request until the client
	// gives up, the outage ends or the emulator is closed, then closes the
	// connection.
	FaultBlackhole = emufault.ModeBlackhole
	// FaultDeliverDrop handles the request normally and, when it created a
	// message, records it (marked ResponseDropped) and closes the
	// connection instead of answering: the "may have been delivered"
	// window. Other requests are answered normally.
	FaultDeliverDrop = emufault.ModeDeliverDrop
)

// faults returns how this emulator names its 5xx modes.
func faults() emufault.Kind { return emufault.Kind{JSON5xx: Fault5xx, HTML5xx: FaultHTML5xx} }

// ParseFaultMode checks a fault mode's name.
func ParseFaultMode(s string) (FaultMode, error) { return faults().Parse(s) }

// Outage is a scripted fault: every API request (with Probability, a
// fraction of them) is hit by Mode until Duration has passed on the
// emulator's clock or StopOutage is called. Status is the HTTP status of
// Fault5xx (default 500) and FaultHTML5xx (default 502).
type Outage = emufault.Outage
