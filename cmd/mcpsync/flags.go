package main

import (
	"net/url"
)

// validate checks the shared flags as check does, and that --url is an
// http:// or https:// URL with a host: one that is not is a mistake in the
// command line (exit 2), not a failure to connect.
func (c *common) validate(needServer bool) error {
	if err := c.check(needServer); err != nil {
		return err
	}
	if c.url == "" {
		return nil
	}
	u, err := url.Parse(c.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("--url %q is not an http:// or https:// URL", c.url)
	}
	return nil
}
