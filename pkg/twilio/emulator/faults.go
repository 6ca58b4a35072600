package emulator

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// FaultMode is what an outage does to the API requests it hits.
type FaultMode string

// Fault modes.
const (
	// Fault5xx answers with Twilio's JSON error, status 500 by default:
	// {"code":20500,"message":"Internal Server Error",...} (20503 for 503).
	Fault5xx FaultMode = "5xx"
	// FaultHTML5xx answers with a proxy's HTML error page, status 502 by
	// default.
	FaultHTML5xx FaultMode = "html5xx"
	// FaultDrop closes the connection without answering.
	FaultDrop FaultMode = "drop"
	// FaultSlow adds Outage.Delay before handling the request normally.
	FaultSlow FaultMode = "slow"
	// FaultBlackhole never answers: it holds the request until the client
	// gives up, the outage ends or the emulator is closed, then closes the
	// connection.
	FaultBlackhole FaultMode = "blackhole"
	// FaultDeliverDrop handles the request normally and, when it created a
	// message, records it (marked ResponseDropped) and closes the
	// connection instead of answering: the "may have been delivered"
	// window. Other requests are answered normally.
	FaultDeliverDrop FaultMode = "deliver-drop"
)

// ParseFaultMode checks a fault mode's name.
func ParseFaultMode(s string) (FaultMode, error) {
	switch m := FaultMode(strings.ToLower(strings.TrimSpace(s))); m {
	case Fault5xx, FaultHTML5xx, FaultDrop, FaultSlow, FaultBlackhole, FaultDeliverDrop:
		return m, nil
	}
	return "", fmt.Errorf("unknown fault mode %q (want 5xx, html5xx, drop, slow, blackhole or deliver-drop)", s)
}

// Outage is a scripted fault: every API request (with Probability, a
// fraction of them) is hit by Mode until Duration has passed on the
// emulator's clock or StopOutage is called.
type Outage struct {
	// Mode is the fault.
	Mode FaultMode
	// Probability is the fraction of requests hit, in (0, 1]; 0 means 1.
	Probability float64
	// Duration ends the outage automatically; 0 means until StopOutage.
	Duration time.Duration
	// Status is the HTTP status of 5xx (default 500) and html5xx (default
	// 502); it must be 500..599.
	Status int
	// Delay is the extra latency of slow (default 5s).
	Delay time.Duration
}

// withDefaults validates the outage and fills defaults.
func (o Outage) withDefaults() (Outage, error) {
	if _, err := ParseFaultMode(string(o.Mode)); err != nil {
		return o, err
	}
	switch {
	case o.Probability == 0:
		o.Probability = 1
	case !(o.Probability > 0 && o.Probability <= 1):
		return o, fmt.Errorf("outage probability must be in (0, 1], got %v", o.Probability)
	}
	if o.Duration < 0 {
		return o, fmt.Errorf("outage duration must not be negative, got %s", o.Duration)
	}
	switch {
	case o.Status == 0 && o.Mode == FaultHTML5xx:
		o.Status = http.StatusBadGateway
	case o.Status == 0:
		o.Status = http.StatusInternalServerError
	case o.Status < 500 || o.Status > 599:
		return o, fmt.Errorf("outage status must be 500..599, got %d", o.Status)
	}
	switch {
	case o.Delay == 0:
		o.Delay = 5 * time.Second
	case o.Delay < 0:
		return o, fmt.Errorf("outage delay must not be negative, got %s", o.Delay)
	}
	return o, nil
}

// outageJSON is Outage on the wire: durations as Go duration strings.
type outageJSON struct {
	Mode        FaultMode `json:"mode"`
	Probability float64   `json:"probability,omitempty"`
	Duration    string    `json:"duration,omitempty"`
	Status      int       `json:"status,omitempty"`
	Delay       string    `json:"delay,omitempty"`
}

// MarshalJSON encodes durations as strings such as "30s", and Status and
// Delay only for the modes that use them.
func (o Outage) MarshalJSON() ([]byte, error) {
	j := outageJSON{Mode: o.Mode, Probability: o.Probability}
	if o.Duration != 0 {
		j.Duration = o.Duration.String()
	}
	if o.Mode == Fault5xx || o.Mode == FaultHTML5xx {
		j.Status = o.Status
	}
	if o.Mode == FaultSlow && o.Delay != 0 {
		j.Delay = o.Delay.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes {"mode":"5xx","probability":0.5,"duration":"30s",
// "status":503,"delay":"2s"}.
func (o *Outage) UnmarshalJSON(b []byte) error {
	var j outageJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*o = Outage{Mode: j.Mode, Probability: j.Probability, Status: j.Status}
	var err error
	if j.Duration != "" {
		if o.Duration, err = time.ParseDuration(j.Duration); err != nil {
			return fmt.Errorf("outage duration: %w", err)
		}
	}
	if j.Delay != "" {
		if o.Delay, err = time.ParseDuration(j.Delay); err != nil {
			return fmt.Errorf("outage delay: %w", err)
		}
	}
	return nil
}

// activeOutage is a running outage.
type activeOutage struct {
	Outage
	until   time.Time     // its end on the emulator's clock; zero for none
	release chan struct{} // closed when the outage ends, to free blackholed requests
}

// fault is the fault chosen for one request; the zero fault means none.
type fault struct {
	mode    FaultMode
	status  int
	delay   time.Duration
	release <-chan struct{}
}

// gatewayPage is the HTML page a proxy serves for a 5xx.
func gatewayPage(status int) string {
	title := fmt.Sprintf("%d %s", status, http.StatusText(status))
	return "<html>\r\n<head><title>" + title + "</title></head>\r\n<body>\r\n<center><h1>" + title +
		"</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
}

// dropConnection closes the client's connection without an answer.
func dropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	// HTTP/2 or a recorder: abort the response; net/http closes the stream
	// and does not log a stack trace for this value.
	panic(http.ErrAbortHandler)
}

// sleep waits d unless ctx or stop ends first; it reports whether d passed.
func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}
