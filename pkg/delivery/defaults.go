package delivery

// DefaultConfig returns the configuration a zero [Config] stands for, every
// default applied: the one place the worker's defaults are written, which
// the telegram-worker's flags take theirs from. Its BotRate is the free
// rate; with PaidBroadcast a zero BotRate means the paid one instead.
func DefaultConfig() Config { return Config{}.withDefaults() }
