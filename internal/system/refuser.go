package system

// A refuser is a loopback address that refuses every TCP connection at once
// and that no other socket can take while it is held. The cluster
// advertises it as every node's route address, so that a node learning of
// another through a third one (an implicit route) does not open a route
// around the proxies.
//
// It must refuse, not accept and close: nats-server retries an implicit
// route whose connection was made and then lost at once, with no delay, so
// a listener that accepts and closes drew about a hundred route
// connections a second from every node for as long as the cluster ran
// (visible in the nodes' logs as "Route connection created" followed by
// "Router connection closed: Client Closed"). A refused implicit route is
// given up after its first attempt (nats-server's cluster connect_retries
// is 0), and the node's explicit routes, through the proxies, stay the only
// ones.
type refuser interface {
	// Addr is the host:port to advertise.
	Addr() string
	// Close releases the address.
	Close() error
}
