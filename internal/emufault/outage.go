package emufault

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Outage is a scripted fault: every API request (with Probability, a
// fraction of them) is hit by Mode until Duration has passed on the
// emulator's clock or the emulator's StopOutage is called.
type Outage struct {
	// Mode is the fault.
	Mode Mode
	// Probability is the fraction of requests hit, in (0, 1]; 0 means 1.
	Probability float64
	// Duration ends the outage automatically; 0 means until StopOutage.
	Duration time.Duration
	// Status is the HTTP status of the two 5xx modes: by default 500 for
	// the API's JSON error and 502 for the HTML page. It must be 500..599.
	Status int
	// Delay is the extra latency of ModeSlow (default 5s).
	Delay time.Duration
}

// WithDefaults validates o for an emulator of kind k and fills its
// defaults. Each error names the field that is wrong and its value.
func (k Kind) WithDefaults(o Outage) (Outage, error) {
	if _, err := k.Parse(string(o.Mode)); err != nil {
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
	case o.Status == 0 && o.Mode == k.JSON5xx:
		o.Status = http.StatusInternalServerError
	case o.Status == 0:
		o.Status = http.StatusBadGateway
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
	Mode        Mode    `json:"mode"`
	Probability float64 `json:"probability,omitempty"`
	Duration    string  `json:"duration,omitempty"`
	Status      int     `json:"status,omitempty"`
	Delay       string  `json:"delay,omitempty"`
}

// MarshalJSON encodes durations as strings such as "30s", and Status and
// Delay only for the modes that use them.
func (o Outage) MarshalJSON() ([]byte, error) {
	j := outageJSON{Mode: o.Mode, Probability: o.Probability}
	if o.Duration != 0 {
		j.Duration = o.Duration.String()
	}
	if o.Mode == Mode5xx || o.Mode == ModeJSON5xx || o.Mode == ModeHTML5xx {
		j.Status = o.Status
	}
	if o.Mode == ModeSlow && o.Delay != 0 {
		j.Delay = o.Delay.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes {"mode":"5xx","probability":0.5,"duration":"30s",
// "status":502,"delay":"2s"}.
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
