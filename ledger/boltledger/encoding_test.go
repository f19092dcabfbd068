package boltledger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/mcpsync/mcpsync/ledger"
)

var timeType = reflect.TypeFor[time.Time]()

// drawTime draws a time of every kind the binary form tells apart: zero
// (also in a zone), in UTC, in Local, in a zone of whole minutes, in one of seconds, and
// beyond the years JSON can store.
func drawTime(t *rapid.T, label string) time.Time {
	at := time.Unix(rapid.Int64Range(-62135596800, 253402300799).Draw(t, label+".sec"), rapid.Int64Range(0, 999_999_999).Draw(t, label+".nsec"))
	switch rapid.IntRange(0, 7).Draw(t, label+".kind") {
	case 0:
		return time.Time{}
	case 7:
		return time.Time{}.In(time.FixedZone("", 60*rapid.IntRange(-24*60, 24*60).Draw(t, label+".zeroIn")))
	case 1:
		return at.UTC()
	case 2:
		return at // Local
	case 3:
		return at.In(time.FixedZone("Z"+label, 60*rapid.IntRange(-24*60, 24*60).Draw(t, label+".minutes")))
	case 4:
		return at.In(time.FixedZone("", rapid.IntRange(-86400, 86400).Draw(t, label+".seconds")))
	case 5:
		return time.Date(rapid.IntRange(10000, 20000).Draw(t, label+".year"), 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return at.Round(0) // a monotonic reading, which neither form keeps
}

// draw fills v, a value of a type the ledger stores, at random: strings
// that are not UTF-8 too, nil and empty slices, nil pointers. A field of a
// kind it does not know fails the test, so that a new one is drawn too.
func draw(t *rapid.T, v reflect.Value, label string) {
	if v.Type() == timeType {
		v.Set(reflect.ValueOf(drawTime(t, label)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		if rapid.Bool().Draw(t, label+".bytes") {
			v.SetString(string(rapid.SliceOfN(rapid.Byte(), 0, 6).Draw(t, label)))
		} else {
			v.SetString(rapid.StringN(0, 12, -1).Draw(t, label))
		}
	case reflect.Bool:
		v.SetBool(rapid.Bool().Draw(t, label))
	case reflect.Uint8:
		v.SetUint(uint64(rapid.Byte().Draw(t, label)))
	case reflect.Uint64:
		v.SetUint(rapid.Uint64().Draw(t, label))
	case reflect.Int64:
		v.SetInt(rapid.Int64().Draw(t, label))
	case reflect.Pointer:
		if rapid.Bool().Draw(t, label+".set") {
			p := reflect.New(v.Type().Elem())
			draw(t, p.Elem(), label)
			v.Set(p)
		}
	case reflect.Slice:
		n := rapid.IntRange(-1, 2).Draw(t, label+".len")
		if n < 0 {
			return // nil
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			draw(t, s.Index(i), fmt.Sprintf("%s[%d]", label, i))
		}
		v.Set(s)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				draw(t, v.Field(i), label+"."+f.Name)
			}
		}
	default:
		t.Fatalf("%s: draw knows no %s", label, v.Type())
	}
}

// fill sets every field of v that is exported, and every one of theirs,
// to a value that is not zero: a field the binary form leaves out reads
// back zero.
func fill(t testing.TB, v reflect.Value, n *int) {
	*n++
	if v.Type() == timeType {
		v.Set(reflect.ValueOf(time.Unix(int64(*n)*1000, int64(*n)).UTC()))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Uint64, reflect.Uint8, reflect.Int64:
		if v.Kind() == reflect.Int64 {
			v.SetInt(int64(*n))
		} else {
			v.SetUint(uint64(*n))
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		fill(t, v.Index(0), n)
		fill(t, v.Index(1), n)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), n)
			}
		}
	default:
		t.Fatalf("fill knows no %s", v.Type())
	}
}

// filledRecord and filledEntry have every field set.
func filledRecord(t testing.TB) *ledger.Record {
	r := new(ledger.Record)
	n := 0
	fill(t, reflect.ValueOf(r).Elem(), &n)
	return r
}

func filledEntry(t testing.TB) ledger.OutboxEntry {
	var e ledger.OutboxEntry
	n := 0
	fill(t, reflect.ValueOf(&e).Elem(), &n)
	e.Schema = ledger.SchemaInvalidation
	return e
}

// Every field of a record and of an outbox entry, and of everything they
// hold, is kept by the binary form: one the form does not know reads back
// zero here, where each is set.
func TestBinaryFormKeepsEveryField(t *testing.T) {
	r := filledRecord(t)
	v, err := encodeRecord(r)
	require.NoError(t, err)
	got, err := decodeRecord(v)
	require.NoError(t, err)
	require.Equal(t, r, got)

	e := filledEntry(t)
	b, err := encodeEntry(e)
	require.NoError(t, err)
	back, err := decodeEntry(b)
	require.NoError(t, err)
	require.Equal(t, e, back)
}

// A record written in the binary form reads back exactly as the same
// record written as JSON does, whatever it holds: strings that are not
// UTF-8 as JSON stores them, times in the zone RFC 3339 gives back, nil
// and empty slices as JSON tells them apart. What JSON cannot store
// (a year past 9999) the binary form refuses too.
func TestBinaryRecordAlwaysReadsBackAsItsJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := new(ledger.Record)
		draw(t, reflect.ValueOf(r).Elem(), "record")
		js, jerr := ledger.EncodeRecord(r)
		v, err := encodeRecord(r)
		if jerr != nil || err != nil {
			if (jerr == nil) != (err == nil) {
				t.Fatalf("JSON: %v; binary: %v", jerr, err)
			}
			return
		}
		want, err := ledger.DecodeRecord(js)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRecord(v)
		if err != nil {
			t.Fatal(err)
		}
		require.Equal(t, want, got, "as JSON, then as binary")
	})
}

// The same of an outbox entry, numbered in its transaction.
func TestBinaryEntryAlwaysReadsBackAsItsJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var e ledger.OutboxEntry
		draw(t, reflect.ValueOf(&e).Elem(), "entry")
		e.Schema = ledger.SchemaInvalidation
		seq := rapid.Uint64().Draw(t, "seq")
		js, jerr := ledger.EncodeOutboxEntry(func() ledger.OutboxEntry { c := e; c.Seq = seq; return c }())
		b, err := encodeEntry(e)
		if jerr != nil || err != nil {
			if (jerr == nil) != (err == nil) {
				t.Fatalf("JSON: %v; binary: %v", jerr, err)
			}
			return
		}
		numberEntry(b, seq)
		want, err := ledger.DecodeOutboxEntry(js)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeEntry(b)
		if err != nil {
			t.Fatal(err)
		}
		require.Equal(t, want, got, "as JSON, then as binary")
	})
}

// A stored value that is not one the encoder wrote is refused with a
// typed error, never a panic: ErrLedgerCorrupt, or ErrLedgerSchema for
// JSON of another schema. What does decode is a value the encoder writes
// again as it read it.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range []*ledger.Record{{Revision: 1}, filledRecord(f)} {
		v, err := encodeRecord(r)
		require.NoError(f, err)
		f.Add(v)
		f.Add(v[:len(v)-1])
		js, err := ledger.EncodeRecord(r)
		require.NoError(f, err)
		f.Add(append(binary.BigEndian.AppendUint64(nil, r.Revision), js...))
	}
	f.Add([]byte{})
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x01\x02"))
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := decodeRecord(v)
		if err != nil {
			if !errors.Is(err, ledger.ErrLedgerCorrupt) && !(errors.Is(err, ledger.ErrLedgerSchema) && len(v) > 8 && v[8] == '{') {
				t.Fatalf("an untyped error: %v", err)
			}
			return
		}
		once, err := encodeRecord(r)
		require.NoError(t, err, "what reads back writes again")
		back, err := decodeRecord(once)
		require.NoError(t, err)
		twice, err := encodeRecord(back)
		require.NoError(t, err)
		require.True(t, bytes.Equal(once, twice), "written again, it reads back the same")
	})
}

// The same of an outbox entry.
func FuzzDecodeEntry(f *testing.F) {
	e := filledEntry(f)
	b, err := encodeEntry(e)
	require.NoError(f, err)
	f.Add(b)
	f.Add(b[:len(b)/2])
	js, err := ledger.EncodeOutboxEntry(e)
	require.NoError(f, err)
	f.Add(js)
	f.Add([]byte{formatBinary})
	f.Fuzz(func(t *testing.T, v []byte) {
		e, err := decodeEntry(v)
		if err != nil {
			if !errors.Is(err, ledger.ErrLedgerCorrupt) && !errors.Is(err, ledger.ErrLedgerSchema) {
				t.Fatalf("an untyped error: %v", err)
			}
			return
		}
		once, err := encodeEntry(e)
		require.NoError(t, err, "what reads back writes again")
		back, err := decodeEntry(once)
		require.NoError(t, err)
		twice, err := encodeEntry(back)
		require.NoError(t, err)
		require.True(t, bytes.Equal(once, twice), "written again, it reads back the same")
	})
}
