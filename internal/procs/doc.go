// Package procs supervises the real processes of the system for the demo
// (examples/demo) and the chaos harness: it starts a binary with its
// arguments and environment, captures its output in a log file, waits for an
// HTTP readiness URL with a deadline, stops it with SIGTERM and then SIGKILL
// after a bound, reports processes that exit without being asked to, and
// kills everything it started when the supervisor is closed.
//
// Children run in their own process group, so a Ctrl-C at the terminal
// reaches only the supervising program, which then stops them in order. On
// Linux each child also gets SIGKILL if the supervising program dies without
// cleaning up (PR_SET_PDEATHSIG), so even a killed demo leaves no process
// behind.
package procs
