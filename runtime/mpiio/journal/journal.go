// Package journal is the on-disk journal of mpiio's node-local write-back
// cache, and its crash recovery. It imports nothing of gompi's, so
// gompi-proxy can replay a cache directory before starting a job
// (ReplayDir) without linking the rank runtime.
//
// A cache holds, per open file and rank, two files in the cache directory:
// <key>.data, the written bytes appended in order, and <key>.jnl, the
// journal. The journal starts with a header naming the shared file, then
// records: an extent record (the bytes at dataOff..+len of .data belong
// at fileOff of the shared file, or, for a vectored extent, at a list of
// file pieces in turn; with their CRC-32C) is appended after its data, and
// acknowledges the write; a flushed record says every extent up to a
// sequence number is on the shared file. A snapshot extent's record is
// appended before its data, by the writer that owns the journal, and
// counts only once a snapshot writer, after writing the data, set its
// committed flag (a one-byte write into the record: CommitMark), so the
// journal keeps a single appender.
// Replay writes, in order, every acknowledged extent after the last
// flushed record, syncs the shared file, and removes the pair. A torn
// record at the tail (a crash while appending) was never acknowledged and
// is ignored. See docs/io.md for the byte layout.
package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Suffixes of the two files of a journal.
const (
	DataSuffix    = ".data"
	JournalSuffix = ".jnl"
)

var (
	headerMagic = [8]byte{'G', 'M', 'P', 'I', 'J', 'N', 'L', '1'}
	kindExtent  = [4]byte{'X', 'T', 'N', 'T'}
	kindVector  = [4]byte{'X', 'V', 'E', 'C'}
	kindFlushed = [4]byte{'F', 'L', 'S', 'H'}
)

// RecordSize is the size of one journal record (of a vectored extent
// record, its fixed part, followed by PieceSize bytes per piece).
const RecordSize = 48

// PieceSize is the size of one file piece of a vectored extent record.
const PieceSize = 16

// MaxPieces bounds the pieces of one vectored extent record.
const MaxPieces = 1 << 24

// ErrCorrupt: a journal whose acknowledged data does not match its
// checksum (the cache directory's storage lost bytes).
var ErrCorrupt = errors.New("journal: corrupt")

// castagnoli is made on first use: building it costs 0.2-0.6 ms, which every
// gompi-proxy and gompiexec start would pay in package init (they link
// this package to replay caches) although few jobs use it.
var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// Extent is one acknowledged write: Len bytes at DataOff of the data file,
// which belong at FileOff of the shared file or, when Pieces is not nil,
// at each piece's FileOff in turn (the pieces' lengths add up to Len).
type Extent struct {
	Seq     uint64
	FileOff int64 // without Pieces
	Len     int64
	DataOff int64
	CRC     uint32
	// NoCRC: the data was not checksummed (a cache on tmpfs, where the
	// data file cannot lose bytes its journal outlives); CRC is zero.
	NoCRC bool
	// Snapshot: the data is written after the record, by another process
	// (a copy-on-write snapshot of the caller's buffer), which then
	// commits the record (CommitMark). Replay skips an uncommitted one.
	Snapshot bool
	Pieces   []Piece
}

// Flags of a record's flags word. flagCommitted is set after the record
// was written (it is outside the record's CRC) and only with flagSnapshot.
const (
	flagNoCRC     = 1
	flagSnapshot  = 2
	flagCommitted = 4
	flagsOffset   = 44 // the flags word's first byte, which holds them all
)

// CommitMark is the byte that commits a snapshot extent's record, and its
// offset in the record: one byte, so that its write is atomic against the
// writer's death wherever the record lies in the journal.
func CommitMark(e Extent) (off int64, b byte) {
	return flagsOffset, recordFlags(e) | flagCommitted
}

func recordFlags(e Extent) byte {
	var f byte
	if e.NoCRC {
		f |= flagNoCRC
	}
	if e.Snapshot {
		f |= flagSnapshot
	}
	return f
}

// Piece is where Len bytes of a vectored extent go in the shared file.
type Piece struct{ FileOff, Len int64 }

// Each calls fn for every piece of e: its file offset, its offset in the
// data file and its length, in data order. It stops at the first error.
func (e *Extent) Each(fn func(fileOff, dataOff, n int64) error) error {
	if e.Pieces == nil {
		return fn(e.FileOff, e.DataOff, e.Len)
	}
	d := e.DataOff
	for _, p := range e.Pieces {
		if err := fn(p.FileOff, d, p.Len); err != nil {
			return err
		}
		d += p.Len
	}
	return nil
}

// Header encodes a journal's header for the shared file target.
func Header(target string) []byte {
	b := append([]byte(nil), headerMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(target)))
	b = append(b, target...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli()))
}

// ExtentRecord encodes an extent record: a vectored one ("XVEC") when e
// has Pieces, else a plain one ("XTNT").
func ExtentRecord(e Extent) []byte {
	if e.Pieces == nil {
		return record(kindExtent, e)
	}
	return record(kindVector, e)
}

// FlushedRecord encodes "every extent with Seq <= seq is flushed".
func FlushedRecord(seq uint64) []byte { return record(kindFlushed, Extent{Seq: seq}) }

func record(kind [4]byte, e Extent) []byte {
	b := make([]byte, RecordSize+PieceSize*len(e.Pieces))
	copy(b, kind[:])
	binary.LittleEndian.PutUint64(b[8:], e.Seq)
	if kind == kindVector {
		// The fixed part's FileOff slot holds the piece count.
		binary.LittleEndian.PutUint64(b[16:], uint64(len(e.Pieces)))
		for i, p := range e.Pieces {
			binary.LittleEndian.PutUint64(b[RecordSize+PieceSize*i:], uint64(p.FileOff))
			binary.LittleEndian.PutUint64(b[RecordSize+PieceSize*i+8:], uint64(p.Len))
		}
	} else {
		binary.LittleEndian.PutUint64(b[16:], uint64(e.FileOff))
	}
	binary.LittleEndian.PutUint64(b[24:], uint64(e.Len))
	binary.LittleEndian.PutUint64(b[32:], uint64(e.DataOff))
	binary.LittleEndian.PutUint32(b[40:], e.CRC)
	b[flagsOffset] = recordFlags(e)
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[8:], castagnoli()))
	return b
}

// recordCRC is a record's CRC: of bytes [8:], the committed flag cleared.
func recordCRC(r []byte) uint32 {
	c := crc32.Update(0, castagnoli(), r[8:flagsOffset])
	c = crc32.Update(c, castagnoli(), []byte{r[flagsOffset] &^ flagCommitted})
	return crc32.Update(c, castagnoli(), r[flagsOffset+1:])
}

// Checksum is the CRC-32C the extent records carry for their data.
func Checksum(data []byte) uint32 { return crc32.Checksum(data, castagnoli()) }

// UpdateChecksum extends crc, the Checksum of some bytes, by data.
func UpdateChecksum(crc uint32, data []byte) uint32 { return crc32.Update(crc, castagnoli(), data) }

// Parse decodes a journal: its target and the acknowledged extents not
// yet flushed, in order. A torn or garbled tail ends the journal.
func Parse(jnl []byte) (target string, pending []Extent, err error) {
	target, pending, _, err = parse(jnl)
	return target, pending, err
}

// Writing reports whether the journal in f has a snapshot extent that no
// writer has committed yet: a writer may still be at work on it (holding
// the journal's lock), or died without committing it.
func Writing(f *os.File) bool {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return false
	}
	_, _, n, err := parse(b)
	return err == nil && n > 0
}

// parse is Parse that also counts the uncommitted snapshot extents.
func parse(jnl []byte) (target string, pending []Extent, uncommitted int, err error) {
	if len(jnl) < 16 || [8]byte(jnl[:8]) != headerMagic {
		return "", nil, 0, fmt.Errorf("%w: no journal header", ErrCorrupt)
	}
	n := int(binary.LittleEndian.Uint32(jnl[8:]))
	if n > len(jnl)-16 {
		return "", nil, 0, fmt.Errorf("%w: header names %d bytes, journal has %d", ErrCorrupt, n, len(jnl))
	}
	h := 12 + n
	if crc32.Checksum(jnl[:h], castagnoli()) != binary.LittleEndian.Uint32(jnl[h:]) {
		return "", nil, 0, fmt.Errorf("%w: header checksum", ErrCorrupt)
	}
	target = string(jnl[12:h])
	var flushed uint64
	for b := jnl[h+4:]; len(b) >= RecordSize; {
		size := RecordSize
		if [4]byte(b[:4]) == kindVector {
			k := binary.LittleEndian.Uint64(b[16:])
			if k > MaxPieces || k > uint64(len(b)-RecordSize)/PieceSize {
				break // torn tail (or garbage: the CRC cannot be checked)
			}
			size += PieceSize * int(k)
		}
		r := b[:size]
		b = b[size:]
		if recordCRC(r) != binary.LittleEndian.Uint32(r[4:]) {
			break // torn tail
		}
		e := Extent{
			Seq:     binary.LittleEndian.Uint64(r[8:]),
			FileOff: int64(binary.LittleEndian.Uint64(r[16:])),
			Len:     int64(binary.LittleEndian.Uint64(r[24:])),
			DataOff: int64(binary.LittleEndian.Uint64(r[32:])),
			CRC:     binary.LittleEndian.Uint32(r[40:]),
		}
		flags := binary.LittleEndian.Uint32(r[44:])
		if flags&^(flagNoCRC|flagSnapshot|flagCommitted) != 0 || flags&flagCommitted != 0 && flags&flagSnapshot == 0 ||
			flags != 0 && [4]byte(r[:4]) == kindFlushed {
			return target, nil, 0, fmt.Errorf("%w: record %d has unknown flags %#x", ErrCorrupt, e.Seq, flags)
		}
		e.NoCRC, e.Snapshot = flags&flagNoCRC != 0, flags&flagSnapshot != 0
		if e.Snapshot && flags&flagCommitted == 0 {
			// Its writer died before the data was all written, or was
			// never started (replay runs only once no writer holds the
			// journal's lock): skipped, and later records still count.
			uncommitted++
			continue
		}
		switch [4]byte(r[:4]) {
		case kindExtent:
			pending = append(pending, e)
		case kindVector:
			e.FileOff = 0
			e.Pieces = make([]Piece, (size-RecordSize)/PieceSize)
			var sum int64
			for i := range e.Pieces {
				q := r[RecordSize+PieceSize*i:]
				e.Pieces[i] = Piece{int64(binary.LittleEndian.Uint64(q)), int64(binary.LittleEndian.Uint64(q[8:]))}
				if e.Pieces[i].Len < 0 || e.Pieces[i].Len > 1<<40 || e.Pieces[i].FileOff < 0 {
					return target, nil, 0, fmt.Errorf("%w: extent %d: piece %d at %d of length %d", ErrCorrupt, e.Seq, i, e.Pieces[i].FileOff, e.Pieces[i].Len)
				}
				sum += e.Pieces[i].Len
			}
			if sum != e.Len {
				return target, nil, 0, fmt.Errorf("%w: extent %d: pieces add up to %d bytes, not %d", ErrCorrupt, e.Seq, sum, e.Len)
			}
			pending = append(pending, e)
		case kindFlushed:
			flushed = max(flushed, e.Seq)
		default:
			return target, nil, 0, fmt.Errorf("%w: unknown record kind %q", ErrCorrupt, r[:4])
		}
	}
	keep := pending[:0]
	for _, e := range pending {
		if e.Seq > flushed {
			keep = append(keep, e)
		}
	}
	return target, keep, uncommitted, nil
}

// ErrInUse: the journal belongs to a live cache (its writer holds the
// journal's lock), so it must not be replayed.
var ErrInUse = errors.New("journal: in use by a live process")

// Lock takes the lock a journal's writer holds for as long as the journal
// is live (flock, exclusive, not waiting): Replay skips a journal whose
// lock it cannot take, so a launcher replaying a cache directory never
// races the flusher of a job still running on the host.
func Lock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return fmt.Errorf("%w: %s", ErrInUse, f.Name())
		default:
			return fmt.Errorf("lock %s: %w", f.Name(), err)
		}
	}
}

// Replay writes a journal's unflushed extents (journal file jnlPath and
// its data file beside it) to the shared file it names, syncs that, and
// removes the journal pair. It returns the shared file's name and the
// number of extents written. A missing journal is not an error (0
// extents); one a live process holds is ErrInUse.
func Replay(jnlPath string) (target string, n int, err error) {
	f, err := os.OpenFile(jnlPath, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, err
	}
	defer f.Close() // releases the lock, after the removals
	if err := Lock(f); err != nil {
		return "", 0, err
	}
	target, n, err = ReplayFile(f)
	if err != nil {
		return target, n, err
	}
	// The journal goes first: a crash between the two removals leaves a
	// data file without journal, which is garbage, never a replay.
	if err := os.Remove(jnlPath); err != nil {
		return target, n, err
	}
	dataPath := strings.TrimSuffix(jnlPath, JournalSuffix) + DataSuffix
	if err := os.Remove(dataPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return target, n, err
	}
	return target, n, nil
}

// ReplayFile replays the journal open (and locked, see Lock) as f, its
// data file beside it, and removes nothing: for a cache that reuses its
// journal's name. An empty journal (a writer killed before its header
// was written) acknowledged nothing.
func ReplayFile(f *os.File) (target string, n int, err error) {
	jnlPath := f.Name()
	jnl, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", jnlPath, err)
	}
	if len(jnl) == 0 {
		return "", 0, nil
	}
	dataPath := strings.TrimSuffix(jnlPath, JournalSuffix) + DataSuffix
	target, pending, err := Parse(jnl)
	if err != nil {
		return target, 0, fmt.Errorf("%s: %w", jnlPath, err)
	}
	if len(pending) > 0 {
		if err := apply(target, dataPath, pending); err != nil {
			return target, 0, fmt.Errorf("replaying %s into %s: %w", jnlPath, target, err)
		}
	}
	return target, len(pending), nil
}

// chunk is replay's read size.
const chunk = 4 << 20

func apply(target, dataPath string, pending []Extent) error {
	data, err := os.Open(dataPath)
	if err != nil {
		return err
	}
	defer data.Close()
	// Not created: the crashed job's Open made it, so a missing file was
	// removed since (or its file system is not mounted here), and a new
	// one would hold only these extents, or hide them from the real one.
	out, err := os.OpenFile(target, os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w (removed since the crash, or its file system not mounted here?): the journal keeps its cached writes; remove the journal if they are not wanted", err)
	}
	if err != nil {
		return err
	}
	buf := make([]byte, chunk)
	for _, e := range pending {
		if e.Len < 0 || e.Len > 1<<40 {
			out.Close()
			return fmt.Errorf("%w: extent %d has length %d", ErrCorrupt, e.Seq, e.Len)
		}
		// The checksum is checked before anything is written: a corrupt
		// extent must not reach the shared file.
		crc := uint32(0)
		for done := int64(0); done < e.Len && !e.NoCRC; {
			b := buf[:min(int64(len(buf)), e.Len-done)]
			if _, err := data.ReadAt(b, e.DataOff+done); err != nil {
				out.Close()
				return fmt.Errorf("%w: extent %d data: %v", ErrCorrupt, e.Seq, err)
			}
			crc = crc32.Update(crc, castagnoli(), b)
			done += int64(len(b))
		}
		if !e.NoCRC && crc != e.CRC {
			out.Close()
			return fmt.Errorf("%w: extent %d (file offset %d, %d bytes): data checksum mismatch", ErrCorrupt, e.Seq, e.FileOff, e.Len)
		}
		if err := Copy(out, data, &e, buf); err != nil {
			out.Close()
			return err
		}
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Copy writes extent e from its data file to the shared file, reading
// len(buf) bytes at a time (several pieces per read when they are small).
func Copy(dst io.WriterAt, data io.ReaderAt, e *Extent, buf []byte) error {
	type run struct{ fileOff, dataOff, n int64 }
	var pend []run // pieces (or parts) staged in buf, buf[0:used]
	used := int64(0)
	flush := func() error {
		if used == 0 {
			return nil
		}
		if _, err := data.ReadAt(buf[:used], pend[0].dataOff); err != nil {
			return fmt.Errorf("%w: extent %d data: %v", ErrCorrupt, e.Seq, err)
		}
		k := int64(0)
		for _, r := range pend {
			if _, err := dst.WriteAt(buf[k:k+r.n], r.fileOff); err != nil {
				return err
			}
			k += r.n
		}
		pend, used = pend[:0], 0
		return nil
	}
	if err := e.Each(func(fileOff, dataOff, n int64) error {
		for n > 0 {
			if used == int64(len(buf)) {
				if err := flush(); err != nil {
					return err
				}
			}
			m := min(n, int64(len(buf))-used)
			pend = append(pend, run{fileOff, dataOff, m})
			used += m
			fileOff, dataOff, n = fileOff+m, dataOff+m, n-m
		}
		return nil
	}); err != nil {
		return err
	}
	return flush()
}

// ReplayDir replays every journal in a cache directory (for a launcher,
// before it starts a job), leaving out those a live process holds. It
// returns the shared files touched. A missing directory has nothing to
// replay.
func ReplayDir(dir string) ([]string, error) {
	ents, err := filepath.Glob(filepath.Join(dir, "*"+JournalSuffix))
	if err != nil {
		return nil, err
	}
	var targets []string
	var errs []error
	for _, j := range ents {
		t, n, err := Replay(j)
		if errors.Is(err, ErrInUse) {
			continue // a running job's: its own Sync/Close flushes it
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n > 0 {
			targets = append(targets, t)
		}
	}
	return targets, errors.Join(errs...)
}

// Unflush rewrites every flushed record of the journal in f (open
// read-write) as one that flushes nothing (sequence 0), newest first, so
// that replay writes every extent again. For a cache whose fsync of the
// shared file failed: its flushed records promised bytes the file system
// may have dropped (a write-back error is reported by fsync, after the
// writes succeeded). Rewriting the newest first keeps every intermediate
// state safe: replay then writes more extents, never fewer, and writing an
// extent again in order is harmless.
func Unflush(f *os.File) error {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return err
	}
	if len(b) < 16 || [8]byte(b[:8]) != headerMagic {
		return fmt.Errorf("%w: %s: no journal header", ErrCorrupt, f.Name())
	}
	n := int(binary.LittleEndian.Uint32(b[8:]))
	if n > len(b)-16 {
		return fmt.Errorf("%w: %s: header names %d bytes", ErrCorrupt, f.Name(), n)
	}
	var at []int64
	for off := 16 + n; len(b)-off >= RecordSize; {
		size := RecordSize
		if [4]byte(b[off:off+4]) == kindVector {
			k := binary.LittleEndian.Uint64(b[off+16:])
			if k > MaxPieces || k > uint64(len(b)-off-RecordSize)/PieceSize {
				break
			}
			size += PieceSize * int(k)
		}
		r := b[off : off+size]
		if recordCRC(r) != binary.LittleEndian.Uint32(r[4:]) {
			break // the torn tail parse stops at too
		}
		if [4]byte(r[:4]) == kindFlushed {
			at = append(at, int64(off))
		}
		off += size
	}
	none := FlushedRecord(0)
	for i := len(at) - 1; i >= 0; i-- {
		if _, err := f.WriteAt(none, at[i]); err != nil {
			return fmt.Errorf("%s: %w", f.Name(), err)
		}
	}
	return nil
}
