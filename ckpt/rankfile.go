package ckpt

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/cow"
)

// Section kinds in a rank file's index (docs/ckpt.md).
const (
	kindGob    = "gob"
	kindRaw    = "raw"
	kindStream = "stream"
)

// section is one registered piece of application state.
type section struct {
	name string
	kind string
	save func(w io.Writer) (int64, error)
	load func(r io.Reader, size int64) error
	size func() int64 // the bytes save will write, when known beforehand (raw slices); nil otherwise
	// mem, for raw slices, returns the slice's bytes when they lie in
	// cow.Make's memory (a snapshot may save them), nil otherwise.
	mem func() []byte
}

// index is the trailer of a rank file.
type index struct {
	Epoch    int            `json:"epoch"`
	Rank     int            `json:"rank"`
	Ranks    int            `json:"ranks"`
	Sections []sectionEntry `json:"sections"`
}

type sectionEntry struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	Size int64  `json:"size"`
}

// maxIndex bounds a rank file's index so a corrupt length cannot make a
// reader allocate gigabytes.
const maxIndex = 16 << 20

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeSections writes every section, then the index and its length.
func writeSections(w io.Writer, secs []section, ix index) error {
	for _, s := range secs {
		cw := &countWriter{w: w}
		if _, err := s.save(cw); err != nil {
			return fmt.Errorf("section %q: %w", s.name, err)
		}
		ix.Sections = append(ix.Sections, sectionEntry{Name: s.name, Kind: s.kind, Size: cw.n})
	}
	return writeIndex(w, ix)
}

// writeIndex writes the index and its length.
func writeIndex(w io.Writer, ix index) error {
	b, err := json.Marshal(ix)
	if err != nil {
		return err
	}
	b = binary.BigEndian.AppendUint64(b, uint64(len(b)))
	_, err = w.Write(b)
	return err
}

// rankFile is an opened rank file with its index read.
type rankFile struct {
	f   *os.File
	ix  index
	off map[string]int64
}

func openRankFile(path string) (*rankFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	rf, err := readIndex(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rf.f = f
	return rf, nil
}

var errBadIndex = errors.New("bad rank file index")

func readIndex(r io.ReaderAt, size int64) (*rankFile, error) {
	if size < 8 {
		return nil, fmt.Errorf("%w: file of %d bytes", errBadIndex, size)
	}
	var lb [8]byte
	if _, err := r.ReadAt(lb[:], size-8); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint64(lb[:])
	if n > maxIndex || int64(n) > size-8 {
		return nil, fmt.Errorf("%w: index length %d in a file of %d bytes", errBadIndex, n, size)
	}
	b := make([]byte, n)
	if _, err := r.ReadAt(b, size-8-int64(n)); err != nil {
		return nil, err
	}
	rf := &rankFile{off: map[string]int64{}}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&rf.ix); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadIndex, err)
	}
	var off int64
	for _, s := range rf.ix.Sections {
		if s.Size < 0 || off+s.Size > size-8-int64(n) {
			return nil, fmt.Errorf("%w: section %q of %d bytes past the data", errBadIndex, s.Name, s.Size)
		}
		rf.off[s.Name] = off
		off += s.Size
	}
	return rf, nil
}

// section returns a reader of the named section and its size.
func (rf *rankFile) section(name string) (io.Reader, int64, error) {
	off, ok := rf.off[name]
	if !ok {
		return nil, 0, fmt.Errorf("no section %q", name)
	}
	for _, s := range rf.ix.Sections {
		if s.Name == name {
			return io.NewSectionReader(rf.f, off, s.Size), s.Size, nil
		}
	}
	return nil, 0, fmt.Errorf("no section %q", name)
}

func (rf *rankFile) close() { rf.f.Close() }

// gobSection saves *ptr with encoding/gob.
func gobSection(name string, ptr any) section {
	return section{name: name, kind: kindGob,
		save: func(w io.Writer) (int64, error) { return 0, gob.NewEncoder(w).Encode(ptr) },
		load: func(r io.Reader, _ int64) error { return gob.NewDecoder(r).Decode(ptr) },
	}
}

// rawSection saves a numeric slice's bytes as they are in memory.
func rawSection[T mpi.Number](name string, s *[]T) section {
	var zero T
	esize := int64(unsafe.Sizeof(zero))
	bytesOf := func(v []T) []byte {
		if len(v) == 0 {
			return nil
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*int(esize))
	}
	return section{name: name, kind: kindRaw,
		size: func() int64 { return int64(len(*s)) * esize },
		mem: func() []byte {
			if !cow.Owns(*s) {
				return nil
			}
			return bytesOf(*s)
		},
		save: func(w io.Writer) (int64, error) {
			n, err := w.Write(bytesOf(*s))
			return int64(n), err
		},
		load: func(r io.Reader, size int64) error {
			if size%esize != 0 {
				return fmt.Errorf("%d bytes is not a whole number of %d-byte elements", size, esize)
			}
			n := int(size / esize)
			if len(*s) != n {
				if cow.Owns(*s) {
					// Stay in cow's memory, so later checkpoints
					// still snapshot it.
					v, err := cow.Make[T](n)
					if err != nil {
						return err
					}
					cow.Free(*s) // an error: not the allocation's start; it stays mapped
					*s = v
				} else {
					*s = make([]T, n)
				}
			}
			_, err := io.ReadFull(r, bytesOf(*s))
			return err
		},
	}
}

// streamSection saves through the application's io.WriterTo and loads
// through its io.ReaderFrom, bounded to the saved size.
func streamSection(name string, w io.WriterTo, r io.ReaderFrom) section {
	return section{name: name, kind: kindStream,
		save: func(out io.Writer) (int64, error) { return w.WriteTo(out) },
		load: func(in io.Reader, size int64) error {
			n, err := r.ReadFrom(in)
			if err == nil && n != size {
				err = fmt.Errorf("read %d of %d bytes", n, size)
			}
			return err
		},
	}
}
