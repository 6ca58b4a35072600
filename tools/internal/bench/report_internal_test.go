package bench

import "testing"

func TestFmtNum(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0"}, {30, "30"}, {29.43, "29.4"}, {1.234, "1.23"}, {0.3333, "0.333"},
		{407.4, "407"}, {123088.4, "123,088"}, {-12345, "-12,345"}, {1e6, "1,000,000"},
	} {
		if got := fmtNum(tc.in); got != tc.want {
			t.Errorf("fmtNum(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
