// An independent verifier of rolltape's canonical encoding and hash chain, written from
// docs/canonical-encoding.md alone, run against schemas/vectors/canonical.json.
//
// It exists to prove the spec is enough: a consumer in another language can re-encode records
// byte for byte and verify chains without the Python reference implementation.
//
// Usage: go run . path/to/canonical.json
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

type vectors struct {
	Values []struct {
		Name      string `json:"name"`
		Canonical string `json:"canonical"`
		Sha256    string `json:"sha256"`
	} `json:"values"`
	Floats []struct {
		Bits  string `json:"bits"`
		Token string `json:"token"`
	} `json:"floats"`
	Chain []struct {
		Record string `json:"record"`
		Hash   string `json:"hash"`
	} `json:"chain"`
}

func parse(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // keep integers exact and tell them from floats by their text
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// formatFloat writes a finite double as Python's repr does (see the spec's Floats section).
func formatFloat(f float64) string {
	sci := strconv.FormatFloat(f, 'e', -1, 64) // shortest round-trip digits: d.ddde±XX
	mant, expText, _ := strings.Cut(sci, "e")
	exp, _ := strconv.Atoi(expText)
	if exp < -4 || exp >= 16 {
		return sci
	}
	neg := strings.HasPrefix(mant, "-")
	digits := strings.Replace(strings.TrimPrefix(mant, "-"), ".", "", 1)
	var out string
	if exp < 0 {
		out = "0." + strings.Repeat("0", -exp-1) + digits
	} else if len(digits) <= exp+1 {
		out = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	} else {
		out = digits[:exp+1] + "." + digits[exp+1:]
	}
	if neg {
		out = "-" + out
	}
	return out
}

func writeString(b *bytes.Buffer, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("string is not valid UTF-8")
	}
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return nil
}

func encode(b *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case string:
		return writeString(b, x)
	case json.Number:
		text := x.String()
		if strings.ContainsAny(text, ".eE") {
			f, err := strconv.ParseFloat(text, 64)
			if err != nil || math.IsInf(f, 0) {
				return fmt.Errorf("bad float %q", text)
			}
			b.WriteString(formatFloat(f))
		} else {
			i, err := strconv.ParseInt(text, 10, 64)
			if err != nil {
				return fmt.Errorf("integer %q outside the signed 64-bit range", text)
			}
			b.WriteString(strconv.FormatInt(i, 10))
		}
	case []any:
		b.WriteByte('[')
		for i, item := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := encode(b, item); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys) // byte order of UTF-8 == code point order
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeString(b, k); err != nil {
				return err
			}
			b.WriteByte(':')
			if err := encode(b, x[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("unexpected %T", v)
	}
	return nil
}

func canonical(v any) ([]byte, error) {
	var b bytes.Buffer
	err := encode(&b, v)
	return b.Bytes(), err
}

func sha(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func main() {
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Println("cannot read vectors:", err)
		os.Exit(2)
	}
	var vs vectors
	if err := json.Unmarshal(raw, &vs); err != nil {
		fmt.Println("cannot parse vectors:", err)
		os.Exit(2)
	}
	passed, failed := 0, 0
	check := func(ok bool, what string) {
		if ok {
			passed++
		} else {
			failed++
			fmt.Println("FAIL:", what)
		}
	}
	for _, c := range vs.Values {
		v, err := parse([]byte(c.Canonical))
		out, err2 := canonical(v)
		check(err == nil && err2 == nil && string(out) == c.Canonical, "re-encode "+c.Name)
		check(sha([]byte(c.Canonical)) == c.Sha256, "sha256 "+c.Name)
	}
	for _, c := range vs.Floats {
		bits, _ := hex.DecodeString(c.Bits)
		f := math.Float64frombits(binary.BigEndian.Uint64(bits))
		check(formatFloat(f) == c.Token, fmt.Sprintf("float %s -> %s (got %s)", c.Bits, c.Token, formatFloat(f)))
	}
	prev := strings.Repeat("0", 64)
	for i, c := range vs.Chain {
		v, err := parse([]byte(c.Record))
		if err != nil {
			check(false, fmt.Sprintf("chain record %d parses", i))
			continue
		}
		obj := v.(map[string]any)
		out, err := canonical(obj)
		check(err == nil && string(out) == c.Record, fmt.Sprintf("chain record %d is canonical", i))
		stored, _ := obj["hash"].(string)
		delete(obj, "hash")
		body, err := canonical(obj)
		check(err == nil && sha(body) == stored && stored == c.Hash, fmt.Sprintf("chain record %d hash", i))
		check(obj["prev_hash"] == prev, fmt.Sprintf("chain record %d links to its predecessor", i))
		check(obj["seq"].(json.Number).String() == strconv.Itoa(i), fmt.Sprintf("chain record %d seq", i))
		prev = stored
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}
