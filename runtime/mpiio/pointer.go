package mpiio

import (
	"fmt"
	"io"

	mpi "github.com/gompi/gompi/runtime"
)

// Whence values of Seek and SeekShared (MPI_SEEK_SET, _CUR, _END); the
// same numbers as io.SeekStart, io.SeekCurrent and io.SeekEnd.
const (
	SeekSet = io.SeekStart   // the offset itself
	SeekCur = io.SeekCurrent // the current position plus the offset
	SeekEnd = io.SeekEnd     // the end of file, as seen through the view, plus the offset
)

// Individual file pointers (MPI_File_read, _write, _seek, ...): each rank
// has one per open File, counted in etypes of its current view, starting
// at 0 and reset to 0 by SetView. A rank's pointer operations are
// serialized by ptrMu (the pointer is claimed and advanced around the I/O).

// Read reads len(buf) bytes of the view at the individual file pointer
// and advances it by the etypes read (independent, MPI_File_read). At end
// of file it returns the bytes read, the pointer moves past them only, and
// the error is an *Error wrapping io.EOF.
func (f *File) Read(buf []byte) (int, error) {
	return f.atPointer(false, false, buf)
}

// Write writes buf to the view at the individual file pointer and advances
// it past what was written (independent, MPI_File_write).
func (f *File) Write(buf []byte) (int, error) {
	return f.atPointer(true, false, buf)
}

// ReadAll is Read done collectively (MPI_File_read_all): every rank
// calls it, each at its own pointer.
func (f *File) ReadAll(buf []byte) (int, error) {
	return f.atPointer(false, true, buf)
}

// WriteAll is Write done collectively (MPI_File_write_all).
func (f *File) WriteAll(buf []byte) (int, error) {
	return f.atPointer(true, true, buf)
}

func (f *File) atPointer(write, coll bool, buf []byte) (int, error) {
	f.ptrMu.Lock()
	defer f.ptrMu.Unlock()
	f.mu.RLock()
	v, atomic := f.view, f.atomic
	f.mu.RUnlock()
	off := f.ptr
	var n int
	var err error
	switch {
	case coll:
		n, err = f.collective(write, buf, off)
	case write:
		if err = f.check("write", true); err == nil {
			n, err = f.writeAt(v, atomic, false, buf, off)
		}
	default:
		if err = f.check("read", false); err == nil {
			n, err = f.readAt(v, atomic, buf, off)
		}
	}
	// What was accessed, in whole etypes (a file ending inside an etype
	// leaves the pointer before it).
	f.ptr = off + int64(n)/v.etype
	return n, err
}

// Iread starts Read (MPI_File_iread). As MPI specifies for nonblocking
// calls, the pointer moves by the whole request at once, so that the next
// call starts after it; the request's Status.Bytes is what was read.
func (f *File) Iread(buf []byte) *mpi.Request {
	off, err := f.claim("read", false, buf)
	if err != nil {
		return failed(err)
	}
	return f.IreadAt(buf, off)
}

// Iwrite starts Write (MPI_File_iwrite); the pointer moves at once.
func (f *File) Iwrite(buf []byte) *mpi.Request {
	off, err := f.claim("write", true, buf)
	if err != nil {
		return failed(err)
	}
	return f.IwriteAt(buf, off)
}

// IreadAll starts ReadAll (MPI_File_iread_all; collective, started in the
// same order on every rank); the pointer moves at once.
func (f *File) IreadAll(buf []byte) *mpi.Request {
	// A failed claim leaves off at the pointer, where the collective
	// finds the same error and agrees on it with the other ranks.
	off, _ := f.claim("read all", false, buf)
	return f.IreadAtAll(buf, off)
}

// IwriteAll starts WriteAll (MPI_File_iwrite_all); the pointer moves at
// once.
func (f *File) IwriteAll(buf []byte) *mpi.Request {
	off, _ := f.claim("write all", true, buf)
	return f.IwriteAtAll(buf, off)
}

// claim takes the individual pointer's position for a request of buf and
// moves the pointer past it; on error it returns the pointer unmoved.
func (f *File) claim(op string, write bool, buf []byte) (int64, error) {
	f.ptrMu.Lock()
	defer f.ptrMu.Unlock()
	if err := f.check(op, write); err != nil {
		return f.ptr, err
	}
	f.mu.RLock()
	v := f.view
	f.mu.RUnlock()
	if err := f.checkOff(op, f.ptr, v, len(buf)); err != nil {
		return f.ptr, err
	}
	off := f.ptr
	f.ptr += int64(len(buf)) / v.etype
	return off, nil
}

// Seek moves the individual file pointer (MPI_File_seek; independent) to
// offset etypes from the start of the view (SeekSet), from the pointer
// (SeekCur) or from the end of file as seen through the view (SeekEnd),
// and returns the new position. A negative result is an error (*Error
// wrapping mpi.ErrArg), and leaves the pointer where it was.
func (f *File) Seek(offset int64, whence int) (int64, error) {
	if f.closed.Load() {
		return 0, f.err("seek", -1, ErrClosed)
	}
	f.ptrMu.Lock()
	defer f.ptrMu.Unlock()
	f.mu.RLock()
	v := f.view
	f.mu.RUnlock()
	pos, err := f.seekTarget("seek", v, f.ptr, offset, whence)
	if err != nil {
		return f.ptr, err
	}
	f.ptr = pos
	return pos, nil
}

// seekTarget computes a seek's new position from cur (the pointer's).
func (f *File) seekTarget(op string, v *view, cur, offset int64, whence int) (int64, error) {
	var base int64
	switch whence {
	case SeekSet:
	case SeekCur:
		base = cur
	case SeekEnd:
		size, err := f.Size()
		if err != nil {
			return 0, f.err(op, -1, err)
		}
		base = v.endEtypes(size)
	default:
		return 0, f.err(op, -1, fmt.Errorf("%w: whence %d (want SeekSet, SeekCur or SeekEnd)", mpi.ErrArg, whence))
	}
	pos := base + offset
	if offset > 0 && pos < base || offset < 0 && pos > base {
		return 0, f.err(op, -1, fmt.Errorf("%w: position %d%+d overflows", mpi.ErrArg, base, offset))
	}
	if pos < 0 {
		return 0, f.err(op, -1, fmt.Errorf("%w: seek to negative position %d (etypes: %d%+d)", mpi.ErrArg, pos, base, offset))
	}
	if v.etype > 0 && pos > maxOff/v.etype {
		return 0, f.err(op, -1, fmt.Errorf("%w: position %d overflows", mpi.ErrArg, pos))
	}
	return pos, nil
}

// Position is the individual file pointer in etypes of the view
// (MPI_File_get_position).
func (f *File) Position() (int64, error) {
	if f.closed.Load() {
		return 0, f.err("position", -1, ErrClosed)
	}
	f.ptrMu.Lock()
	defer f.ptrMu.Unlock()
	return f.ptr, nil
}

// ByteOffset is the absolute byte offset in the file of etype offset off
// of the caller's view (MPI_File_get_byte_offset): where an access at off
// begins.
func (f *File) ByteOffset(off int64) (int64, error) {
	if f.closed.Load() {
		return 0, f.err("byte offset", -1, ErrClosed)
	}
	f.mu.RLock()
	v := f.view
	f.mu.RUnlock()
	switch {
	case off < 0:
		return 0, f.err("byte offset", -1, fmt.Errorf("%w: negative offset %d", mpi.ErrArg, off))
	case v.size == 0:
		return 0, f.err("byte offset", -1, fmt.Errorf("%w: the view's filetype holds no data", ErrView))
	case off > maxOff/v.etype || !v.fits(off*v.etype, v.etype):
		return 0, f.err("byte offset", -1, fmt.Errorf("%w: offset %d overflows", mpi.ErrArg, off))
	}
	return v.fileOff(off * v.etype), nil
}

// endEtypes is the end of a file of size bytes as seen through the view:
// the etypes of the stream that lie before size, a partial etype counted
// whole (so that a write at SeekEnd does not overwrite it).
func (v *view) endEtypes(size int64) int64 {
	b := v.streamBytes(size)
	return (b + v.etype - 1) / v.etype
}

// streamBytes counts the view's stream bytes at file offsets below size.
func (v *view) streamBytes(size int64) int64 {
	rel := size - v.disp
	if v.size == 0 || rel <= 0 {
		return 0
	}
	if v.contiguous() {
		return rel
	}
	// Tile i's blocks lie in [i*extent+lb, (i+1)*extent+lb): the tiles
	// before t0 end below size; at most a few after it reach into it.
	t0 := int64(0)
	if rel > v.lb+v.extent {
		t0 = (rel - v.lb - v.extent) / v.extent
	}
	n := t0 * v.size
	for t := t0; t*v.extent+v.lb < rel; t++ {
		for _, b := range v.blocks {
			start := t*v.extent + b.Off
			if start >= rel {
				break
			}
			n += min(b.Len, rel-start)
		}
	}
	return n
}
