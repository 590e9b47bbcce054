package mpiio

// ParseHints is parseHints for the fuzz test: the error, and the hints in
// force it gives (for one aggregator) when it accepts them.
func ParseHints(h Hints) (Hints, error) {
	c, err := parseHints(h)
	if err != nil {
		return nil, err
	}
	h = c.effective(1)
	if c.stripe == 0 { // the file system's, set at Open
		delete(h, "striping_unit")
	}
	return h, nil
}
