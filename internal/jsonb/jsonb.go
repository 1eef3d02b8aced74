// Package jsonb checks that valid JSON text is also storable as PostgreSQL
// jsonb, which is stricter than encoding/json: it rejects invalid UTF-8
// (json.Valid lets it through inside strings), the escaped NUL character
// \u0000, unpaired UTF-16 surrogate escapes and numbers outside the range of
// its numeric type. The packages use it to reject such payloads with their
// own validation errors before anything reaches the database.
package jsonb

import (
	"fmt"
	"unicode/utf8"
)

// Numeric limits of PostgreSQL's numeric type as jsonb parses numbers:
// at most 131072 digits before the decimal point and 16383 after it.
const (
	maxWeight = 131072
	maxScale  = 16383
)

// Check returns nil when b, which must already be valid JSON (json.Valid),
// can be stored as jsonb, or an error saying why not. It is conservative
// for absurd numbers: a number whose written exponent would put it beyond
// numeric's range is rejected even when it is zero (0e1000000).
func Check(b []byte) error {
	if !utf8.Valid(b) { // json.Valid lets invalid UTF-8 through inside strings
		return fmt.Errorf("not valid UTF-8")
	}
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			n, err := checkString(b[i:])
			if err != nil {
				return err
			}
			i += n
		case c == '-' || c >= '0' && c <= '9':
			n, err := checkNumber(b[i:])
			if err != nil {
				return err
			}
			i += n
		default:
			i++
		}
	}
	return nil
}

// checkString checks the string literal starting at s[0] == '"' and
// returns its length.
func checkString(s []byte) (int, error) {
	pendingHigh := false // the previous escape was a high surrogate
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '"':
			if pendingHigh {
				return 0, fmt.Errorf(`unpaired UTF-16 surrogate escape`)
			}
			return i + 1, nil
		case '\\':
			if i+1 >= len(s) {
				return 0, fmt.Errorf("truncated escape")
			}
			if s[i+1] != 'u' {
				if pendingHigh {
					return 0, fmt.Errorf(`unpaired UTF-16 surrogate escape`)
				}
				i++
				continue
			}
			if i+6 > len(s) {
				return 0, fmt.Errorf("truncated escape")
			}
			var r rune
			for _, h := range s[i+2 : i+6] {
				r <<= 4
				switch {
				case h >= '0' && h <= '9':
					r |= rune(h - '0')
				case h >= 'a' && h <= 'f':
					r |= rune(h-'a') + 10
				case h >= 'A' && h <= 'F':
					r |= rune(h-'A') + 10
				default:
					return 0, fmt.Errorf("invalid escape")
				}
			}
			i += 5
			switch {
			case r == 0:
				return 0, fmt.Errorf(`contains \u0000, which jsonb cannot store`)
			case r >= 0xD800 && r <= 0xDBFF:
				if pendingHigh {
					return 0, fmt.Errorf(`unpaired UTF-16 surrogate escape`)
				}
				pendingHigh = true
			case r >= 0xDC00 && r <= 0xDFFF:
				if !pendingHigh {
					return 0, fmt.Errorf(`unpaired UTF-16 surrogate escape`)
				}
				pendingHigh = false
			default:
				if pendingHigh {
					return 0, fmt.Errorf(`unpaired UTF-16 surrogate escape`)
				}
			}
		default:
			if pendingHigh {
				return 0, fmt.Errorf(`unpaired UTF-16 surrogate escape`)
			}
		}
	}
	return 0, fmt.Errorf("unterminated string")
}

// checkNumber checks the number starting at s[0] and returns its length.
func checkNumber(s []byte) (int, error) {
	i := 0
	if s[i] == '-' {
		i++
	}
	intDigits, fracDigits := 0, 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		intDigits++
	}
	if i < len(s) && s[i] == '.' {
		for i++; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			fracDigits++
		}
	}
	exp, neg := 0, false
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			neg = s[i] == '-'
			i++
		}
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			if exp < 1<<30 {
				exp = exp*10 + int(s[i]-'0')
			}
		}
	}
	if neg {
		exp = -exp
	}
	if intDigits+exp > maxWeight || fracDigits-exp > maxScale || fracDigits > maxScale {
		return 0, fmt.Errorf("number %.20q… is beyond the range of jsonb's numeric", s[:min(i, 20)])
	}
	return i, nil
}
