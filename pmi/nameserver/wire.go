// Package nameserver speaks the protocol of MPICH's hydra_nameserver, the
// name service jobs share for MPI_Publish_name and MPI_Lookup_name across
// jobs (gompiexec -nameserver HOST[:PORT], as mpiexec.hydra's): a Client
// for the launcher and a Server for gompi-nameserver. Either end works with
// MPICH's: a gompiexec job can publish through hydra_nameserver and an
// mpiexec.hydra job look the name up, and the other way round.
//
// The protocol (docs/pmi.md) is Hydra's: a request is a list of strings,
// a 32-bit count then each string as a 32-bit length (its bytes and a NUL)
// and the bytes; the answer is one such string. Integers are in the host's
// byte order in Hydra; this package uses little-endian, which is every
// platform gompi runs on.
package nameserver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// DefaultPort is hydra_nameserver's port when none is given.
const DefaultPort = 6392

// Limits on what a peer may send: names and ports are short (MPICH's
// MPI_MAX_PORT_NAME is 1024), and a request holds at most three strings.
const (
	MaxString  = 64 << 10
	maxStrings = 8
)

// ErrProtocol is a malformed message.
var ErrProtocol = errors.New("nameserver: protocol error")

// WriteStrings sends strs as one message.
func WriteStrings(w io.Writer, strs ...string) error {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, int32(len(strs)))
	for _, s := range strs {
		if err := putString(&b, s); err != nil {
			return err
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// ReadStrings reads one message of strings.
func ReadStrings(r io.Reader) ([]string, error) {
	n, err := readLen(r)
	if err != nil {
		return nil, err
	}
	if n < 1 || n > maxStrings {
		return nil, fmt.Errorf("%w: %d strings", ErrProtocol, n)
	}
	out := make([]string, n)
	for i := range out {
		if out[i], err = ReadString(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// WriteString sends one string (an answer).
func WriteString(w io.Writer, s string) error {
	var b bytes.Buffer
	if err := putString(&b, s); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// ReadString reads one string (an answer). A NUL ends it, as C reads it.
func ReadString(r io.Reader) (string, error) {
	n, err := readLen(r)
	if err != nil {
		return "", err
	}
	if n < 0 || n > MaxString+1 {
		return "", fmt.Errorf("%w: string of %d bytes", ErrProtocol, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", unexpected(err)
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b), nil
}

func putString(b *bytes.Buffer, s string) error {
	if len(s) > MaxString || bytes.IndexByte([]byte(s), 0) >= 0 {
		return fmt.Errorf("nameserver: %.40q: a string must be under %d bytes, with no NUL", s, MaxString)
	}
	binary.Write(b, binary.LittleEndian, int32(len(s)+1))
	b.WriteString(s)
	b.WriteByte(0)
	return nil
}

func readLen(r io.Reader) (int, error) {
	var n int32
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return 0, unexpected(err)
	}
	return int(n), nil
}

// unexpected keeps a clean end (io.EOF before a message) and makes an end
// inside one io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	return err
}
