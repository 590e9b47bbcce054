package mpi

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"reflect"
	"sync"
)

// ErrCodec: a value could not be encoded or decoded. In a value
// collective every rank returns it when any rank's codec failed; a
// receive of a value the sender could not encode returns it too.
var ErrCodec = errors.New("mpi: value codec failed")

// A value message is one frame byte, then the codec's bytes (valOK) or the
// text of the sender's codec error (valFailed). The failure frame is sent
// so that the receiver of a value that could not be encoded gets an error
// instead of waiting for a message that never comes.
// A third frame, valArg, carries the text of an argument error of the
// sender's (ScatterValue's root with the wrong number of values), so its
// receivers fail with ErrArg instead of waiting.
const (
	valOK     byte = 0
	valFailed byte = 1
	valArg    byte = 2
)

// appendMarshaler is implemented by codecs that can encode after a
// prefix (saves copying the encoding behind the frame byte).
type appendMarshaler interface {
	appendMarshal(dst []byte, v any) ([]byte, error)
}

// codecMarshal appends v's encoding to dst; a panicking codec (gob
// panics on a nil pointer) is an error.
func codecMarshal(cd Codec, dst []byte, v any) (b []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			b, err = nil, fmt.Errorf("codec panicked: %v", p)
		}
	}()
	if am, ok := cd.(appendMarshaler); ok {
		return am.appendMarshal(dst, v)
	}
	enc, err := cd.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(dst, enc...), nil
}

func codecUnmarshal(cd Codec, data []byte, ptr any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("codec panicked: %v", p)
		}
	}()
	return cd.Unmarshal(data, ptr)
}

// encodeValue frames v's encoding. When encoding fails it returns the
// failure frame (to be sent all the same) and an error wrapping ErrCodec.
func (c *Comm) encodeValue(v any) ([]byte, error) {
	b, err := codecMarshal(c.p.cfg.Codec, []byte{valOK}, v)
	if err != nil {
		return append([]byte{valFailed}, err.Error()...), fmt.Errorf("%w: encode %T: %w", ErrCodec, v, err)
	}
	return b, nil
}

// decodeValue decodes a value message from rank from into ptr.
func (c *Comm) decodeValue(msg []byte, from int, ptr any) error {
	if len(msg) == 0 {
		return fmt.Errorf("%w: empty value message from rank %d", ErrCodec, from)
	}
	switch msg[0] {
	case valOK:
		if err := codecUnmarshal(c.p.cfg.Codec, msg[1:], ptr); err != nil {
			return fmt.Errorf("%w: decode value from rank %d into %T: %w", ErrCodec, from, ptr, err)
		}
		return nil
	case valFailed:
		return fmt.Errorf("%w: rank %d could not encode its value: %s", ErrCodec, from, msg[1:])
	case valArg:
		return fmt.Errorf("%w: rank %d: %s", ErrArg, from, msg[1:])
	}
	return fmt.Errorf("%w: value message from rank %d has frame byte %d", ErrCodec, from, msg[0])
}

// SendValue sends any value the Codec (default encoding/gob) can encode.
// A value that cannot be encoded (a nil pointer, a gob type not
// registered behind an interface, a channel) returns an error wrapping
// ErrCodec, and the matching receive returns one as well.
func (c *Comm) SendValue(v any, dest, tag int) error {
	if err := checkTag(tag, false); err != nil {
		return err
	}
	data, cerr := c.encodeValue(v)
	_, err := c.isendWait(c.ctx, data, dest, tag, true).Wait(context.Background())
	if cerr != nil {
		return errors.Join(cerr, err)
	}
	return err
}

// RecvValue receives a value sent with SendValue into ptr (a non-nil
// pointer; anything else is ErrArg at once, and the message stays). With
// the gob codec, a value sent as a registered type may be
// received into an interface it implements or into its own type.
func (c *Comm) RecvValue(ptr any, src, tag int) (Status, error) {
	if err := checkTag(tag, true); err != nil {
		return Status{}, err
	}
	// Refused before matching: a receive that cannot store the value
	// must not wait for the message and then consume it.
	if rv := reflect.ValueOf(ptr); rv.Kind() != reflect.Pointer || rv.IsNil() {
		return Status{}, fmt.Errorf("%w: RecvValue from rank %d, tag %d, into %T: need a non-nil pointer", ErrArg, src, tag, ptr)
	}
	r := c.irecv(c.ctx, nil, 1, src, tag, true)
	st, err := r.Wait(context.Background())
	if err != nil || (src == ProcNull && st.Source == ProcNull) {
		return st, err
	}
	return st, c.decodeValue(r.data, st.Source, ptr)
}

// gobCodec is the default Codec. Its encoding starts with one byte:
// gobInterface when the value's dynamic type is registered with gob
// (gob.Register), so the value is encoded as an interface value that
// names its type and a receiver may decode it into an interface;
// gobConcrete otherwise (gob's plain encoding of the value).
type gobCodec struct{}

const (
	gobConcrete  = 'c'
	gobInterface = 'i'
)

// gobRegistered caches, per dynamic type, whether gob could encode it as
// an interface value (it was registered): types are registered in init
// functions, before any value is sent.
var gobRegistered sync.Map // reflect.Type -> bool

func (g gobCodec) Marshal(v any) ([]byte, error) { return g.appendMarshal(nil, v) }

func (gobCodec) appendMarshal(dst []byte, v any) ([]byte, error) {
	if v == nil {
		return nil, errors.New("gob: cannot encode a nil value")
	}
	// gob cannot represent a nil pointer: at top level it panics, and
	// behind another pointer it sends the zero value (the receiver would
	// get a value the sender does not have).
	for rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer; rv = rv.Elem() {
		if rv.IsNil() {
			return nil, fmt.Errorf("gob: cannot encode a nil pointer (%s)", rv.Type())
		}
	}
	t := reflect.TypeOf(v)
	reg, known := gobRegistered.Load(t)
	if !known || reg.(bool) {
		buf := bytes.NewBuffer(append(dst, gobInterface))
		if err := gob.NewEncoder(buf).Encode(&v); err == nil {
			if !known {
				gobRegistered.Store(t, true)
			}
			return buf.Bytes(), nil
		}
	}
	buf := bytes.NewBuffer(append(dst, gobConcrete))
	if err := gob.NewEncoder(buf).Encode(v); err != nil {
		return nil, err
	}
	if !known {
		gobRegistered.Store(t, false) // the interface form failed, the plain one did not
	}
	return buf.Bytes(), nil
}

func (gobCodec) Unmarshal(data []byte, ptr any) error {
	dst := reflect.ValueOf(ptr)
	if dst.Kind() != reflect.Pointer || dst.IsNil() {
		return fmt.Errorf("gob: cannot decode into %T: need a non-nil pointer", ptr)
	}
	if len(data) == 0 {
		return errors.New("gob: empty encoding")
	}
	switch data[0] {
	case gobConcrete:
		return gob.NewDecoder(bytes.NewReader(data[1:])).Decode(ptr)
	case gobInterface:
	default:
		return fmt.Errorf("gob: encoding starts with %#x, want %q or %q", data[0], gobConcrete, gobInterface)
	}
	var x any
	if err := gob.NewDecoder(bytes.NewReader(data[1:])).Decode(&x); err != nil {
		return err
	}
	dst = dst.Elem()
	if x == nil {
		dst.SetZero()
		return nil
	}
	if xv := reflect.ValueOf(x); xv.Type().AssignableTo(dst.Type()) {
		dst.Set(xv)
		return nil
	}
	// Not assignable as is: let gob convert, as it does between plain
	// encodings (an int into an int64, a struct into one with some of
	// its fields, a value into a pointer).
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(x); err != nil {
		return err
	}
	return gob.NewDecoder(&b).Decode(ptr)
}
