package ignition

import "net/url"

// RedactURL is a config's URL as a console line may show it: its
// password, if any, replaced (user:xxxxx@); "(not a URL)" when it does
// not parse, since the text may hold the password.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(not a URL)"
	}
	return u.Redacted()
}
