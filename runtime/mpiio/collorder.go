package mpiio

// Collective data accesses run one at a time per File, in the order the
// rank started them. MPI lets a rank start several nonblocking collective
// accesses (IwriteAtAll, IreadAtAll, IwriteAll, IreadAll) and mix blocking
// ones in, provided every rank starts them in the same order; each runs
// its own messages and agreements on the File's communicator, so two
// running at once would take each other's messages. A turn is taken when
// the call starts (for a nonblocking one, before it returns), so the
// order is the program's; the call runs when the previous turn is done.
// The File's other collective calls (SetView, Sync, SetSize, Preallocate,
// SetAtomicity, SeekShared, Close) take a turn too: MPI makes calling them
// with accesses outstanding erroneous, and so they wait for those
// instead of taking their messages.

// turn returns a channel closed when the previous collective access is
// done, and the function that ends this one's turn.
func (f *File) turn() (prev <-chan struct{}, done func()) {
	mine := make(chan struct{})
	f.collMu.Lock()
	prev = f.collTail
	f.collTail = mine
	f.collMu.Unlock()
	if prev == nil {
		c := make(chan struct{})
		close(c)
		prev = c
	}
	return prev, func() { close(mine) }
}

// collective runs a collective read or write in its turn.
func (f *File) collective(write bool, buf []byte, off int64) (int, error) {
	prev, done := f.turn()
	defer done()
	<-prev
	return f.collectiveNow(write, buf, off)
}
