package main

import (
	"flag"
	"net/url"
)

// retired are flags no longer accepted: given, they are a usage error like
// any unknown flag. --principal was the former name of --subject.
var retired = []string{"principal"}

// registerCommon adds the flags every command shares to fs, the retired
// ones left out.
func (c *common) registerCommon(fs *flag.FlagSet) {
	all := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	c.register(all)
	all.VisitAll(func(f *flag.Flag) {
		for _, name := range retired {
			if f.Name == name {
				return
			}
		}
		fs.Var(f.Value, f.Name, f.Usage)
	})
}

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
