package mpiio

import (
	"unsafe"

	mpi "github.com/gompi/gompi/runtime"
)

// Typed forms over slices of any mpi.Number: the slice's memory is read or
// written as its raw bytes (no encoding; little endian on every platform
// gompi runs on), and counts are elements. off counts etypes of the view,
// as in the []byte methods; a view whose etype is mpi.TypeOf[T]() makes
// offsets count elements.

func bytesOf[T mpi.Number](buf []T) []byte {
	if len(buf) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf))), len(buf)*int(unsafe.Sizeof(buf[0])))
}

func elems[T mpi.Number](n int) int {
	var z T
	return n / int(unsafe.Sizeof(z))
}

// ReadAt is File.ReadAt for a typed buffer; it returns elements read.
func ReadAt[T mpi.Number](f *File, buf []T, off int64) (int, error) {
	n, err := f.ReadAt(bytesOf(buf), off)
	return elems[T](n), err
}

// WriteAt is File.WriteAt for a typed buffer.
func WriteAt[T mpi.Number](f *File, buf []T, off int64) (int, error) {
	n, err := f.WriteAt(bytesOf(buf), off)
	return elems[T](n), err
}

// ReadAtAll is File.ReadAtAll for a typed buffer.
func ReadAtAll[T mpi.Number](f *File, buf []T, off int64) (int, error) {
	n, err := f.ReadAtAll(bytesOf(buf), off)
	return elems[T](n), err
}

// WriteAtAll is File.WriteAtAll for a typed buffer.
func WriteAtAll[T mpi.Number](f *File, buf []T, off int64) (int, error) {
	n, err := f.WriteAtAll(bytesOf(buf), off)
	return elems[T](n), err
}

// IreadAt is File.IreadAt for a typed buffer; the Status's Count is in
// elements, Bytes in bytes.
func IreadAt[T mpi.Number](f *File, buf []T, off int64) *mpi.Request {
	return typedReq[T](f.IreadAt(bytesOf(buf), off))
}

// IwriteAt is File.IwriteAt for a typed buffer.
func IwriteAt[T mpi.Number](f *File, buf []T, off int64) *mpi.Request {
	return typedReq[T](f.IwriteAt(bytesOf(buf), off))
}

// typedReq converts a byte request's count to elements.
func typedReq[T mpi.Number](r *mpi.Request) *mpi.Request {
	out, done := mpi.StartRequest()
	go func() {
		<-r.Done()
		_, st, err := r.Test()
		st.Count = elems[T](st.Bytes)
		done(st, err)
	}()
	return out
}

// Read is File.Read (at the individual file pointer) for a typed buffer;
// it returns elements read.
func Read[T mpi.Number](f *File, buf []T) (int, error) {
	n, err := f.Read(bytesOf(buf))
	return elems[T](n), err
}

// Write is File.Write for a typed buffer.
func Write[T mpi.Number](f *File, buf []T) (int, error) {
	n, err := f.Write(bytesOf(buf))
	return elems[T](n), err
}

// ReadAll is File.ReadAll for a typed buffer.
func ReadAll[T mpi.Number](f *File, buf []T) (int, error) {
	n, err := f.ReadAll(bytesOf(buf))
	return elems[T](n), err
}

// WriteAll is File.WriteAll for a typed buffer.
func WriteAll[T mpi.Number](f *File, buf []T) (int, error) {
	n, err := f.WriteAll(bytesOf(buf))
	return elems[T](n), err
}

// Iread is File.Iread for a typed buffer (Status.Count in elements).
func Iread[T mpi.Number](f *File, buf []T) *mpi.Request {
	return typedReq[T](f.Iread(bytesOf(buf)))
}

// Iwrite is File.Iwrite for a typed buffer.
func Iwrite[T mpi.Number](f *File, buf []T) *mpi.Request {
	return typedReq[T](f.Iwrite(bytesOf(buf)))
}

// ReadShared is File.ReadShared (at the shared file pointer) for a typed
// buffer.
func ReadShared[T mpi.Number](f *File, buf []T) (int, error) {
	n, err := f.ReadShared(bytesOf(buf))
	return elems[T](n), err
}

// WriteShared is File.WriteShared for a typed buffer.
func WriteShared[T mpi.Number](f *File, buf []T) (int, error) {
	n, err := f.WriteShared(bytesOf(buf))
	return elems[T](n), err
}

// ReadOrdered is File.ReadOrdered for a typed buffer.
func ReadOrdered[T mpi.Number](f *File, buf []T) (int, error) {
	n, err := f.ReadOrdered(bytesOf(buf))
	return elems[T](n), err
}

// WriteOrdered is File.WriteOrdered for a typed buffer.
func WriteOrdered[T mpi.Number](f *File, buf []T) (int, error) {
	n, err := f.WriteOrdered(bytesOf(buf))
	return elems[T](n), err
}
