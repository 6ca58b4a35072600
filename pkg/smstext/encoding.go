package smstext

import "unicode/utf16"

// Encoding is the character set an SMS is sent in.
type Encoding uint8

// Encodings. The zero Encoding is that of the empty text.
const (
	// GSM7 is the GSM 03.38 default alphabet, 7 bits a character.
	GSM7 Encoding = iota + 1
	// UCS2 is UTF-16, 16 bits a code unit.
	UCS2
)

// String returns "GSM-7", "UCS-2" or "none".
func (e Encoding) String() string {
	switch e {
	case GSM7:
		return "GSM-7"
	case UCS2:
		return "UCS-2"
	}
	return "none"
}

// Segment capacities, in septets (GSM-7) or UTF-16 code units (UCS-2).
const (
	// GSM7Single is what one GSM-7 SMS holds.
	GSM7Single = 160
	// GSM7Part is what each part of a concatenated GSM-7 SMS holds.
	GSM7Part = 153
	// UCS2Single is what one UCS-2 SMS holds.
	UCS2Single = 70
	// UCS2Part is what each part of a concatenated UCS-2 SMS holds.
	UCS2Part = 67
)

// Size is the size of a text as an SMS.
type Size struct {
	// Encoding is the encoding the text needs.
	Encoding Encoding
	// Units is the text's length in the encoding's units: septets for
	// GSM-7 (an extension character counts two), UTF-16 code units for
	// UCS-2.
	Units int
	// Segments is how many SMS the text is sent as; 0 for the empty text.
	Segments int
}

// Measure returns the encoding, length and segment count of text. The
// empty text has the zero Size.
func Measure(text string) Size {
	if text == "" {
		return Size{}
	}
	enc := GSM7
	if !IsGSM7(text) {
		enc = UCS2
	}
	width, single, part := gsmWidth, GSM7Single, GSM7Part
	if enc == UCS2 {
		width, single, part = ucsWidth, UCS2Single, UCS2Part
	}
	total := 0
	for _, r := range text {
		total += width(r)
	}
	m := Size{Encoding: enc, Units: total, Segments: 1}
	if total <= single {
		return m
	}
	// Concatenated: fill parts greedily, never splitting a character's
	// units (an escape and its character, or a surrogate pair) across two.
	fill := 0
	for _, r := range text {
		w := width(r)
		if fill+w > part {
			m.Segments++
			fill = 0
		}
		fill += w
	}
	return m
}

// Segments returns how many SMS text is sent as.
func Segments(text string) int { return Measure(text).Segments }

// IsGSM7 reports whether every character of text is in the GSM-7 default
// alphabet or its extension table.
func IsGSM7(text string) bool {
	for _, r := range text {
		if gsmWidth(r) == 0 {
			return false
		}
	}
	return true
}

// ucsWidth is a rune's length in UTF-16 code units.
func ucsWidth(r rune) int {
	if n := utf16.RuneLen(r); n > 0 {
		return n
	}
	return 1 // an invalid rune is sent as U+FFFD
}

// gsmWidth is a rune's length in GSM-7 septets: 1 for the default
// alphabet, 2 for the extension table (escape + character), 0 when GSM-7
// cannot carry it.
func gsmWidth(r rune) int {
	if r < 0x80 {
		switch {
		case r == '\n' || r == '\r':
			return 1
		case r == '\f':
			return 2
		case r < 0x20 || r == 0x7f || r == '`':
			return 0
		}
		switch r {
		case '^', '{', '}', '\\', '[', '~', ']', '|':
			return 2
		}
		return 1
	}
	switch r {
	case '£', '¥', 'è', 'é', 'ù', 'ì', 'ò', 'Ç', 'Ø', 'ø', 'Å', 'å',
		'Δ', 'Φ', 'Γ', 'Λ', 'Ω', 'Π', 'Ψ', 'Σ', 'Θ', 'Ξ',
		'Æ', 'æ', 'ß', 'É', '¤', '¡', 'Ä', 'Ö', 'Ñ', 'Ü', '§', '¿', 'ä', 'ö', 'ñ', 'ü', 'à':
		return 1
	case '€':
		return 2
	}
	return 0
}
