package mpi

import (
	"fmt"
	"slices"
	"testing"
)

// Ordinary MPI programs, as a new user writes them, at 1..8 ranks on
// every transport: each checks its result against a serial computation.

// progSizes are the world sizes the programs run at.
var progSizes = []int{1, 2, 3, 4, 5, 8}

func forPrograms(t *testing.T, f func(c *Comm) error) {
	for _, n := range progSizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			transports(t, n, nil, func(t *testing.T, comms []*Comm) { each(t, comms, f) })
		})
	}
}

// jacobiStep is one sweep of u (rows x cols with a halo of one) into v.
func jacobiStep(u, v []float64, rows, cols int) {
	w := cols + 2
	for i := 1; i <= rows; i++ {
		for j := 1; j <= cols; j++ {
			v[i*w+j] = 0.25 * (u[(i-1)*w+j] + u[(i+1)*w+j] + u[i*w+j-1] + u[i*w+j+1])
		}
	}
}

// jacobiInit is the initial value at global interior cell (gi, gj).
func jacobiInit(gi, gj int) float64 { return float64((gi*31+gj*17)%23) - 11 }

// progJacobi: a 2-D Jacobi iteration on a Cartesian grid (DimsCreate,
// Shift, halo exchange with a row and a Vector column type), checked
// cell by cell against the serial sweep; then row and column
// communicators (Sub) broadcast and reduce.
func progJacobi(c *Comm) error {
	const ly, lx, iters = 4, 3, 12
	dims, err := DimsCreate(c.Size(), []int{0, 0})
	if err != nil {
		return err
	}
	cart, err := c.CartCreate(dims, []bool{false, false})
	if err != nil {
		return err
	}
	me, err := cart.Coords(cart.Rank())
	if err != nil {
		return err
	}
	w := lx + 2
	u, v := make([]float64, (ly+2)*w), make([]float64, (ly+2)*w)
	for i := 1; i <= ly; i++ {
		for j := 1; j <= lx; j++ {
			u[i*w+j] = jacobiInit(me[0]*ly+i-1, me[1]*lx+j-1)
		}
	}
	col, err := Vector(ly, 1, w, Float64)
	if err != nil {
		return err
	}
	row, err := Contiguous(lx, Float64)
	if err != nil {
		return err
	}
	up, down, err := cart.Shift(0, 1)
	if err != nil {
		return err
	}
	left, right, err := cart.Shift(1, 1)
	if err != nil {
		return err
	}
	for it := 0; it < iters; it++ {
		// Rows: send the last interior row down, receive the top halo from
		// up; and the reverse. Columns likewise with the column type.
		for _, x := range []struct {
			sbuf, rbuf []float64
			dt         Datatype
			dst, src   int
		}{
			{u[ly*w+1:], u[1:], row, down, up},
			{u[w+1:], u[(ly+1)*w+1:], row, up, down},
			{u[w+lx:], u[w:], col, right, left},
			{u[w+1:], u[w+lx+1:], col, left, right},
		} {
			if _, err := SendrecvType(cart.Comm, x.sbuf, 1, x.dt, x.dst, 3, x.rbuf, 1, x.dt, x.src, 3); err != nil {
				return fmt.Errorf("iteration %d: halo: %w", it, err)
			}
		}
		jacobiStep(u, v, ly, lx)
		u, v = v, u
	}
	// Serial reference over the whole grid.
	gy, gx := dims[0]*ly, dims[1]*lx
	gw := gx + 2
	su, sv := make([]float64, (gy+2)*gw), make([]float64, (gy+2)*gw)
	for i := 1; i <= gy; i++ {
		for j := 1; j <= gx; j++ {
			su[i*gw+j] = jacobiInit(i-1, j-1)
		}
	}
	for it := 0; it < iters; it++ {
		jacobiStep(su, sv, gy, gx)
		su, sv = sv, su
	}
	for i := 1; i <= ly; i++ {
		for j := 1; j <= lx; j++ {
			if got, want := u[i*w+j], su[(me[0]*ly+i)*gw+me[1]*lx+j]; got != want {
				return fmt.Errorf("coords %v cell (%d,%d): %v, want %v", me, i, j, got, want)
			}
		}
	}
	// Row communicators: the first column broadcasts its row index; column
	// communicators sum their ranks' column index.
	rowc, err := cart.Sub([]bool{false, true})
	if err != nil {
		return err
	}
	colc, err := cart.Sub([]bool{true, false})
	if err != nil {
		return err
	}
	b := []int{-1}
	if me[1] == 0 {
		b[0] = me[0]
	}
	if err := Bcast(rowc.Comm, b, 0); err != nil || b[0] != me[0] {
		return fmt.Errorf("row bcast: %v, %v; want %d", b, err, me[0])
	}
	s := []int{0}
	if err := Allreduce(colc.Comm, []int{me[1] + 1}, s, Sum); err != nil || s[0] != dims[0]*(me[1]+1) {
		return fmt.Errorf("column allreduce: %v, %v; want %d", s, err, dims[0]*(me[1]+1))
	}
	for _, x := range []*Comm{rowc.Comm, colc.Comm, cart.Comm} {
		if err := x.Free(); err != nil {
			return err
		}
	}
	return nil
}

func TestProgramJacobi(t *testing.T) { forPrograms(t, progJacobi) }

// sortKeys is rank r's keys: a deterministic pseudo-random count (rank 1
// has none) and values.
func sortKeys(r int) []int64 {
	if r == 1 {
		return nil
	}
	x := uint64(r*7919 + 13)
	next := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	k := make([]int64, 50+int(next()%200))
	for i := range k {
		k[i] = int64(next()%100000) - 50000
	}
	return k
}

// progSampleSort: sample sort with Allgather of samples, Alltoall of
// counts and Alltoallv of keys; every key ends on exactly one rank,
// ranks hold ascending ranges, and the concatenation is the sorted input.
func progSampleSort(c *Comm) error {
	n, r := c.Size(), c.Rank()
	keys := sortKeys(r)
	slices.Sort(keys)
	// n-1 samples per rank (the key at evenly spaced positions, or a
	// sentinel when it has none).
	samples := make([]int64, n-1)
	for i := range samples {
		if len(keys) == 0 {
			samples[i] = 1 << 40
		} else {
			samples[i] = keys[(i+1)*len(keys)/n]
		}
	}
	all := make([]int64, n*(n-1))
	if err := Allgather(c, samples, all); err != nil {
		return err
	}
	slices.Sort(all)
	split := make([]int64, n-1)
	for i := range split {
		split[i] = all[(i+1)*(n-1)]
	}
	sc := make([]int, n)
	for _, k := range keys {
		b, _ := slices.BinarySearch(split, k+1) // bucket: first splitter > k
		sc[b]++
	}
	rc := make([]int, n)
	if err := Alltoall(c, sc, rc); err != nil {
		return err
	}
	total := 0
	for _, k := range rc {
		total += k
	}
	mine := make([]int64, total)
	if err := Alltoallv(c, keys, sc, nil, mine, rc, nil); err != nil {
		return err
	}
	slices.Sort(mine)
	// Gather everything at rank 0 and compare with the serial sort.
	counts := make([]int, n)
	if err := Allgather(c, []int{len(mine)}, counts); err != nil {
		return err
	}
	sum := 0
	for _, k := range counts {
		sum += k
	}
	var got []int64
	if r == 0 {
		got = make([]int64, sum)
	}
	if err := Gatherv(c, mine, got, counts, nil, 0); err != nil {
		return err
	}
	if r == 0 {
		var want []int64
		for q := 0; q < n; q++ {
			want = append(want, sortKeys(q)...)
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			return fmt.Errorf("sorted %d keys, want %d; ranks hold %v", len(got), len(want), counts)
		}
	}
	return nil
}

func TestProgramSampleSort(t *testing.T) { forPrograms(t, progSampleSort) }

// progMasterWorker: rank 0 hands out tasks (task i: i+1 numbers) with
// tag 1 and collects results of any length from AnySource with
// Mprobe/Mrecv; tag 2 stops a worker. With one rank the master works
// alone.
func progMasterWorker(c *Comm) error {
	const tasks = 40
	n := c.Size()
	work := func(t int) []int64 {
		out := make([]int64, t+1)
		for i := range out {
			out[i] = int64(t*1000 + i)
		}
		return out
	}
	if c.Rank() != 0 {
		for {
			task := make([]int, 1)
			st, err := Recv(c, task, 0, AnyTag)
			if err != nil {
				return err
			}
			if st.Tag == 2 {
				return nil
			}
			if err := Send(c, work(task[0]), 0, 10+task[0]%5); err != nil {
				return err
			}
		}
	}
	results := map[int][]int64{}
	next := 0
	if n == 1 {
		for ; next < tasks; next++ {
			results[next] = work(next)
		}
	}
	busy := 0
	for w := 1; w < n && next < tasks; w++ {
		if err := Send(c, []int{next}, w, 1); err != nil {
			return err
		}
		next++
		busy++
	}
	for busy > 0 {
		msg, st, err := Mprobe[int64](c, AnySource, AnyTag)
		if err != nil {
			return err
		}
		buf := make([]int64, st.Count)
		if _, err := Mrecv(msg, buf); err != nil {
			return err
		}
		t := int(buf[0] / 1000)
		if st.Tag != 10+t%5 || len(buf) != t+1 {
			return fmt.Errorf("result of task %d from %d: tag %d, %d numbers", t, st.Source, st.Tag, len(buf))
		}
		results[t] = buf
		busy--
		if next < tasks {
			if err := Send(c, []int{next}, st.Source, 1); err != nil {
				return err
			}
			next++
			busy++
		}
	}
	for w := 1; w < n; w++ {
		if err := Send(c, []int{0}, w, 2); err != nil {
			return err
		}
	}
	for t := 0; t < tasks; t++ {
		if !slices.Equal(results[t], work(t)) {
			return fmt.Errorf("task %d: %v", t, results[t])
		}
	}
	return nil
}

func TestProgramMasterWorker(t *testing.T) { forPrograms(t, progMasterWorker) }

// progPrefix: Scan and Exscan prefix sums (an offset per rank for a
// parallel write), and a non-commutative Scan of 2x2 matrices.
func progPrefix(c *Comm) error {
	r := c.Rank()
	cnt := []int64{int64(r*r + 1), int64(r)}
	incl, excl := make([]int64, 2), []int64{-9, -9}
	if err := Scan(c, cnt, incl, Sum); err != nil {
		return err
	}
	if err := Exscan(c, cnt, excl, Sum); err != nil {
		return err
	}
	var want [2]int64
	for q := 0; q <= r; q++ {
		if q == r && (excl[0] != want[0] && r > 0 || excl[1] != want[1] && r > 0) {
			return fmt.Errorf("exscan: %v, want %v", excl, want)
		}
		want[0] += int64(q*q + 1)
		want[1] += int64(q)
	}
	if incl[0] != want[0] || incl[1] != want[1] {
		return fmt.Errorf("scan: %v, want %v", incl, want)
	}
	if r == 0 && (excl[0] != -9 || excl[1] != -9) {
		return fmt.Errorf("exscan on rank 0 wrote %v", excl)
	}
	mul := NewOp("matmul", func(in, inout []int64) {
		for k := 0; k+4 <= len(in); k += 4 {
			a, b := in[k:k+4], inout[k:k+4]
			b[0], b[1], b[2], b[3] = a[0]*b[0]+a[1]*b[2], a[0]*b[1]+a[1]*b[3], a[2]*b[0]+a[3]*b[2], a[2]*b[1]+a[3]*b[3]
		}
	}, false).WithUnit(4)
	m := func(q int) []int64 { return []int64{1, int64(q + 1), 0, 1 + int64(q%2)} }
	got := make([]int64, 4)
	if err := Scan(c, m(r), got, mul); err != nil {
		return err
	}
	acc := m(0)
	for q := 1; q <= r; q++ {
		x := m(q)
		acc = []int64{acc[0]*x[0] + acc[1]*x[2], acc[0]*x[1] + acc[1]*x[3], acc[2]*x[0] + acc[3]*x[2], acc[2]*x[1] + acc[3]*x[3]}
	}
	if !slices.Equal(got, acc) {
		return fmt.Errorf("matrix scan: %v, want %v", got, acc)
	}
	// Exscan of the same: rank r gets m(0)...m(r-1); rank 0 keeps its buffer.
	ex := []int64{-1, -1, -1, -1}
	if err := Exscan(c, m(r), ex, mul); err != nil {
		return err
	}
	wex := []int64{-1, -1, -1, -1}
	for q := 0; q < r; q++ {
		x := m(q)
		if q == 0 {
			wex = x
			continue
		}
		wex = []int64{wex[0]*x[0] + wex[1]*x[2], wex[0]*x[1] + wex[1]*x[3], wex[2]*x[0] + wex[3]*x[2], wex[2]*x[1] + wex[3]*x[3]}
	}
	if !slices.Equal(ex, wex) {
		return fmt.Errorf("matrix exscan: %v, wex %v", ex, wex)
	}
	return nil
}

func TestProgramPrefix(t *testing.T) { forPrograms(t, progPrefix) }

// progNBMix: non-blocking collectives in flight while point-to-point
// traffic (eager and rendezvous) runs on the same communicator, waited
// in the reverse order; and non-blocking collectives on two
// communicators waited in a different order on odd and even ranks.
func progNBMix(c *Comm) error {
	n, r := c.Size(), c.Rank()
	right, left := (r+1)%n, (r-1+n)%n
	in, out := []float64{float64(r), 1}, make([]float64, 2)
	b := make([]int32, 1000)
	if r == n-1 {
		for i := range b {
			b[i] = int32(i * 3)
		}
	}
	ra := Iallreduce(c, in, out, Sum)
	rb := Ibcast(c, b, n-1)
	big := make([]byte, 300<<10)
	for i := range big {
		big[i] = byte(r + i)
	}
	got := make([]byte, len(big))
	rr := Irecv(c, got, left, 0)
	rs := Isend(c, big, right, 0)
	tok := []int{r}
	if _, err := Sendrecv(c, []int{r}, right, 1, tok, left, 1); err != nil {
		return err
	}
	if tok[0] != left {
		return fmt.Errorf("ring: %d, want %d", tok[0], left)
	}
	for _, q := range []*Request{rs, rr, rb, ra} {
		if _, err := q.Wait(bg); err != nil {
			return err
		}
	}
	if out[0] != float64(n*(n-1)/2) || out[1] != float64(n) {
		return fmt.Errorf("iallreduce: %v", out)
	}
	if b[999] != 999*3 {
		return fmt.Errorf("ibcast: %v", b[999])
	}
	for i := range got {
		if got[i] != byte(left+i) {
			return fmt.Errorf("rendezvous message byte %d: %d, want %d", i, got[i], byte(left+i))
		}
	}
	d, err := c.Dup()
	if err != nil {
		return err
	}
	x, y := make([]int, 1), make([]int, 1)
	q1 := Iallreduce(c, []int{1}, x, Sum)
	q2 := Iallreduce(d, []int{2}, y, Sum)
	order := []*Request{q1, q2}
	if r%2 == 1 {
		order = []*Request{q2, q1}
	}
	for _, q := range order {
		if _, err := q.Wait(bg); err != nil {
			return err
		}
	}
	if x[0] != n || y[0] != 2*n {
		return fmt.Errorf("iallreduce on two communicators: %d %d", x[0], y[0])
	}
	return d.Free()
}

func TestProgramNBMix(t *testing.T) { forPrograms(t, progNBMix) }

// progFreeInFlight: messages sent on a communicator and never received
// (eager and rendezvous) when it is freed are discarded, their sends
// complete, and a new communicator (which may reuse the context id)
// never sees them.
func progFreeInFlight(c *Comm) error {
	n, r := c.Size(), c.Rank()
	right, left := (r+1)%n, (r-1+n)%n
	for round := 0; round < 3; round++ {
		d, err := c.Dup()
		if err != nil {
			return err
		}
		small := Isend(d, []int{-1}, right, 7)
		large := Isend(d, make([]int64, 64<<10), right, 7)
		if err := d.Free(); err != nil {
			return fmt.Errorf("round %d: free: %w", round, err)
		}
		for _, q := range []*Request{small, large} {
			if _, err := q.Wait(bg); err != nil {
				return fmt.Errorf("round %d: send pending at Free: %w", round, err)
			}
		}
		d2, err := c.Dup()
		if err != nil {
			return err
		}
		got := make([]int, 1)
		rq := Irecv(d2, got, AnySource, 7)
		if err := Send(d2, []int{round*100 + r}, right, 7); err != nil {
			return err
		}
		st, err := rq.Wait(bg)
		if err != nil || got[0] != round*100+left || st.Source != left {
			return fmt.Errorf("round %d: after Free: %v from %d, %v; want %d", round, got, st.Source, err, round*100+left)
		}
		if err := d2.Free(); err != nil {
			return err
		}
	}
	return nil
}

func TestProgramFreeInFlight(t *testing.T) { forPrograms(t, progFreeInFlight) }

// progHalo3D: a periodic 3-D grid whose six face halos are exchanged with
// Subarray types (with disp 1 and, in the first dimension, disp 2 on
// grids long enough); each halo cell must hold the value the neighbour
// owns at that global position.
func progHalo3D(c *Comm) error {
	const nz, ny, nx = 2, 3, 4
	dims, err := DimsCreate(c.Size(), []int{0, 0, 0})
	if err != nil {
		return err
	}
	cart, err := c.CartCreate(dims, []bool{true, true, true})
	if err != nil {
		return err
	}
	me, _ := cart.Coords(cart.Rank())
	size := []int{nz + 2, ny + 2, nx + 2}
	local := []int{nz, ny, nx}
	g := []int{dims[0] * nz, dims[1] * ny, dims[2] * nx}
	val := func(z, y, x int) float64 { // global periodic coordinates
		z, y, x = mod(z, g[0]), mod(y, g[1]), mod(x, g[2])
		return float64((z*g[1]+y)*g[2] + x)
	}
	at := func(z, y, x int) int { return (z*size[1]+y)*size[2] + x }
	u := make([]float64, size[0]*size[1]*size[2])
	for i := range u {
		u[i] = -1
	}
	for z := 1; z <= nz; z++ {
		for y := 1; y <= ny; y++ {
			for x := 1; x <= nx; x++ {
				u[at(z, y, x)] = val(me[0]*nz+z-1, me[1]*ny+y-1, me[2]*nx+x-1)
			}
		}
	}
	face := func(d, start int) (Datatype, error) {
		sub, st := slices.Clone(local), []int{1, 1, 1}
		sub[d], st[d] = 1, start
		return Subarray(size, sub, st, OrderC, Float64)
	}
	for d := 0; d < 3; d++ {
		lo, err := face(d, 1)
		if err != nil {
			return err
		}
		hi, err := face(d, local[d])
		if err != nil {
			return err
		}
		loHalo, _ := face(d, 0)
		hiHalo, _ := face(d, local[d]+1)
		src, dst, err := cart.Shift(d, 1)
		if err != nil {
			return err
		}
		// Up: my high face to dst's low halo; down: my low face to src's high halo.
		if _, err := SendrecvType(cart.Comm, u, 1, hi, dst, d, u, 1, loHalo, src, d); err != nil {
			return err
		}
		if _, err := SendrecvType(cart.Comm, u, 1, lo, src, 10+d, u, 1, hiHalo, dst, 10+d); err != nil {
			return err
		}
	}
	for d := 0; d < 3; d++ {
		for _, h := range []int{0, local[d] + 1} {
			for a := 1; a <= local[(d+1)%3]; a++ {
				for b := 1; b <= local[(d+2)%3]; b++ {
					idx := make([]int, 3)
					idx[d], idx[(d+1)%3], idx[(d+2)%3] = h, a, b
					want := val(me[0]*nz+idx[0]-1, me[1]*ny+idx[1]-1, me[2]*nx+idx[2]-1)
					if got := u[at(idx[0], idx[1], idx[2])]; got != want {
						return fmt.Errorf("coords %v halo %v: %v, want %v", me, idx, got, want)
					}
				}
			}
		}
	}
	// Shift by 2 along the first dimension wraps as RankOf says.
	src, dst, err := cart.Shift(0, 2)
	if err != nil {
		return err
	}
	ws, _ := cart.RankOf([]int{me[0] + 2, me[1], me[2]})
	wr, _ := cart.RankOf([]int{me[0] - 2, me[1], me[2]})
	if src != wr || dst != ws {
		return fmt.Errorf("shift(0, 2) at %v: %d %d, want %d %d", me, src, dst, wr, ws)
	}
	return cart.Free()
}

func TestProgramHalo3D(t *testing.T) { forPrograms(t, progHalo3D) }

// progPersistentRing: 1-D periodic diffusion with persistent sends and
// receives restarted every iteration (StartAll, WaitAll), checked against
// the serial computation.
func progPersistentRing(c *Comm) error {
	const k, iters = 5, 30
	n, r := c.Size(), c.Rank()
	right, left := (r+1)%n, (r-1+n)%n
	u := make([]float64, k+2)
	for i := 1; i <= k; i++ {
		u[i] = float64((r*k + i) % 7)
	}
	sl, _ := SendInit(c, u[1:2], left, 1)
	sr, _ := SendInit(c, u[k:k+1], right, 2)
	rl, _ := RecvInit(c, u[0:1], left, 2)
	rr, err := RecvInit(c, u[k+1:k+2], right, 1)
	if err != nil {
		return err
	}
	ps := []*Persistent{rl, rr, sl, sr}
	v := make([]float64, k+2)
	for it := 0; it < iters; it++ {
		if err := StartAll(ps...); err != nil {
			return err
		}
		reqs := make([]*Request, len(ps))
		for i, p := range ps {
			reqs[i] = p.Request()
		}
		if _, err := WaitAll(bg, reqs...); err != nil {
			return fmt.Errorf("iteration %d: %w", it, err)
		}
		for i := 1; i <= k; i++ {
			v[i] = (u[i-1] + 2*u[i] + u[i+1]) / 4
		}
		copy(u[1:k+1], v[1:k+1]) // in place: the persistent buffers stay put
	}
	g := n * k
	s := make([]float64, g)
	for i := range s {
		s[i] = float64((i + 1) % 7)
	}
	for it := 0; it < iters; it++ {
		t := make([]float64, g)
		for i := range s {
			t[i] = (s[mod(i-1, g)] + 2*s[i] + s[(i+1)%g]) / 4
		}
		s = t
	}
	for i := 1; i <= k; i++ {
		if u[i] != s[r*k+i-1] {
			return fmt.Errorf("cell %d: %v, want %v", r*k+i-1, u[i], s[r*k+i-1])
		}
	}
	for _, p := range ps {
		p.Free()
	}
	return nil
}

func TestProgramPersistentRing(t *testing.T) { forPrograms(t, progPersistentRing) }
