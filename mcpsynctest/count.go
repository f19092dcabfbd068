package mcpsynctest

// Requests returns how many requests of method the client has sent through
// the Transport so far: every one, whatever a fault made of it (held,
// failed, broken, or sent after the session was dropped). A test bounds
// with it what a steady fault may cost, as the requests per revalidation
// period a server that keeps refusing one URI draws.
func (t *Transport) Requests(method string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent[method]
}

func (t *Transport) countSent(method string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sent == nil {
		t.sent = map[string]int{}
	}
	t.sent[method]++
}
