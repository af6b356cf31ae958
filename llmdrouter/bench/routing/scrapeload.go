package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/epp-peer-discovery/epp-peer-discovery/llmdrouter/bench/internal/modelsim"
)

// The capacity bench's scrape load (issue 49): what reading the model servers'
// metrics costs the replicas at idle when every replica scrapes every server
// (shared-index-default, upstream's metrics-data-source) and when each server is
// scraped once for the fleet (shared-scraping), on many servers with a vLLM
// server's whole page. Both fleets run at once, each in its namespace, on a fleet
// of stub servers of their own, and every window reads both fleets' CPU over the
// same time: the machine's drift falls on both alike, and each window gives one
// paired ratio. Each fleet's scrapes are counted before the next one starts.

// scrapeLoadOptions are the section's flags (servers 0: the section is left out).
type scrapeLoadOptions struct {
	servers, replicas int
	refresh           time.Duration
	page              modelsim.MetricsPage
	windows           int
	window            time.Duration
}

// scrapeFleet is one of the two fleets' figures.
type scrapeFleet struct {
	config string
	// scrapes is /metrics requests per server and second from this fleet.
	scrapes float64
	// idle is each window's CPU per replica (cores).
	idle []float64
}

// scrapeLoadResult is the section's measurement.
type scrapeLoadResult struct {
	o       scrapeLoadOptions
	fleets  []scrapeFleet // every replica scraping, then shared scraping
	failure string
}

// scrapeLoadConfigs are the two fleets: the same configuration but for the
// metrics source.
var scrapeLoadConfigs = []string{"shared-index-default", "shared-scraping"}

// scrapeLoad runs the section with the bench's API server.
func (b *bench) scrapeLoad(o scrapeLoadOptions, epp string) scrapeLoadResult {
	res := scrapeLoadResult{o: o}
	stubs, err := startStubs(o.servers, o.page)
	if err != nil {
		res.failure = err.Error()
		return res
	}
	defer stubs.close()
	sb := &bench{o: runOptions{epp: epp, servers: o.servers, refresh: o.refresh}, env: b.env, servers: stubs.byAddr, scrapeCounts: stubs.scrapes, logf: b.logf}
	var fleets []*fleet
	defer func() {
		for _, f := range fleets {
			f.stop()
		}
	}()
	var others float64 // the scrapes a second of the fleets already up
	for _, name := range scrapeLoadConfigs {
		c, err := configurationNamed(name)
		if err == nil {
			var f *fleet
			if f, err = sb.startFleet(c, o.replicas, stubs, echoOptions{}); err == nil {
				fleets = append(fleets, f)
				// This fleet's scrapes: the servers' a second, less the others'.
				s0, t0 := stubs.total(), time.Now()
				time.Sleep(max(o.window, 4*refreshOrDefault(o.refresh)))
				all := float64(stubs.total()-s0) / time.Since(t0).Seconds()
				res.fleets = append(res.fleets, scrapeFleet{config: c.name, scrapes: (all - others) / float64(o.servers)})
				others = all
			}
		}
		if err != nil {
			res.failure = fmt.Sprintf("%s × %d: %v", name, o.replicas, err)
			return res
		}
	}
	var procs = append(append([]*eppProc{}, fleets[0].procs...), fleets[1].procs...)
	for k := range o.windows {
		p, err := cpuWindow(procs, o.window, nil)
		if err != nil {
			res.failure = err.Error()
			return res
		}
		for i := range res.fleets {
			var sum float64
			for _, c := range p.perCore[i*o.replicas : (i+1)*o.replicas] {
				sum += c
			}
			res.fleets[i].idle = append(res.fleets[i].idle, sum/float64(o.replicas))
		}
		b.logf("scrape load, window %d: idle per replica %.2f%% (every replica scrapes) and %.2f%% (shared scraping) of a core",
			k+1, 100*res.fleets[0].idle[k], 100*res.fleets[1].idle[k])
	}
	return res
}

// refreshOrDefault is the EPPs' --refresh-metrics-interval (0: upstream's 50ms).
func refreshOrDefault(d time.Duration) time.Duration {
	if d <= 0 {
		return 50 * time.Millisecond
	}
	return d
}

// ratio is shared scraping's idle CPU over every replica scraping's, per window:
// their mean with its interval.
func (r scrapeLoadResult) ratio() interval {
	if r.failure != "" || len(r.fleets) != 2 {
		return interval{}
	}
	var rs []float64
	for k, own := range r.fleets[0].idle {
		if own > 0 {
			rs = append(rs, r.fleets[1].idle[k]/own)
		}
	}
	return meanInterval(rs)
}

// report is the section's table and the sentence that reads it.
func (r scrapeLoadResult) report() string {
	if r.o.servers == 0 {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n**Scrape load** (issue 49): %d model servers that serve a `/metrics` page of %s (%s), scraped every %s, and %d replicas of each of two configurations that differ only in their metrics source, up at once on 2 cores, each with servers of its own: every replica scraping every server (upstream's `metrics-data-source`, as the rows above) and shared scraping (`fleet-metrics-data-source`: each server scraped by one replica, its metrics shared with the others). "+
		"Scrapes: each server's `/metrics` requests a second from the fleet, counted before the next fleet starts. Idle CPU per replica: %d windows of %v with no request, both fleets' CPU read over the same windows (`/proc/<pid>/stat`), the mean over the windows with its 95%% interval; the ratio is each window's shared over not shared, their mean and interval. "+
		"The scrape's cost scales with the inverse of the interval: at upstream's 50 ms, the fleet that scrapes everything would need more than this machine's 2 cores.\n\n",
		r.o.servers, bytesString(float64(len(modelsim.IdleMetrics(stubConfig(r.o.page))))), pageName[r.o.page], refreshOrDefault(r.o.refresh), r.o.replicas, r.o.windows, r.o.window)
	if r.failure != "" {
		fmt.Fprintf(&sb, "Not measured: %s\n", firstLine(r.failure))
		return sb.String()
	}
	sb.WriteString("| metrics source | replicas | servers | scrapes per server and second | idle CPU per replica (% of a core) |\n|---|---:|---:|---:|---:|\n")
	for _, f := range r.fleets {
		fmt.Fprintf(&sb, "| %s | %d | %d | %.1f | %s |\n", scrapeSourceName[f.config], r.o.replicas, r.o.servers, f.scrapes, meanInterval(f.idle).scaled(100).format(1))
	}
	fmt.Fprintf(&sb, "\n%s\n", r.sentence())
	return sb.String()
}

// sentence is the section's finding, as the headline quotes it.
func (r scrapeLoadResult) sentence() string {
	if r.o.servers == 0 || r.failure != "" || len(r.fleets) != 2 {
		return ""
	}
	return fmt.Sprintf("At %d replicas and %d servers (%s, scraped every %s), shared scraping reads each server %.1f times a second against %.1f, and a replica's idle CPU is %s of what it is when every replica scrapes every server (paired by window, 95%% interval).",
		r.o.replicas, r.o.servers, pageShort[r.o.page], refreshOrDefault(r.o.refresh), r.fleets[1].scrapes, r.fleets[0].scrapes, r.ratio().format(2))
}

// pageShort names a metrics page in a sentence.
var pageShort = map[modelsim.MetricsPage]string{
	modelsim.VLLMPage: "a vLLM server's whole page",
	"":                "a vLLM server's whole page",
	modelsim.CorePage: "a page of the families llm-d-router reads",
}

// check fails the bench when the section failed, or when the scrapes are not
// what each fleet promises: about one a refresh interval per server with shared
// scraping, one per replica without (a quarter off, either way, for the windows'
// edges).
func (r scrapeLoadResult) check() error {
	if r.failure != "" {
		return fmt.Errorf("scrape load: %s", r.failure)
	}
	per := 1 / refreshOrDefault(r.o.refresh).Seconds()
	if own := r.fleets[0].scrapes; own < 0.75*per*float64(r.o.replicas) {
		return fmt.Errorf("scrape load: every replica scraping: %.1f scrapes per server a second, want about %.1f (%d replicas, every %v)", own, per*float64(r.o.replicas), r.o.replicas, refreshOrDefault(r.o.refresh))
	}
	return checkSharedScrapes(r.fleets[1].scrapes, r.o.refresh)
}

// checkSharedScrapes fails when shared scraping's scrapes per server and second
// are more than a quarter over one replica's.
func checkSharedScrapes(scrapes float64, refresh time.Duration) error {
	if per := 1 / refreshOrDefault(refresh).Seconds(); scrapes > 1.25*per {
		return fmt.Errorf("shared scraping: %.1f scrapes per server a second, want about %.1f (one replica's, every %v)", scrapes, per, refreshOrDefault(refresh))
	}
	return nil
}

// scrapesSentence says how often each model server is scraped with shared
// scraping and without, at each replica count the bench ran.
func scrapesSentence(results []capacityResult) string {
	var shared, own []string
	for _, r := range results {
		if r.failure != "" {
			continue
		}
		switch r.config {
		case "shared-scraping":
			shared = append(shared, fmt.Sprintf("%.1f at %d", r.scrapes, r.replicas))
		case "shared-index-default":
			own = append(own, fmt.Sprintf("%.1f at %d", r.scrapes, r.replicas))
		}
	}
	one := findOne(results, "single")
	if len(shared) == 0 || one == nil {
		return ""
	}
	out := fmt.Sprintf("Each model server is scraped %.1f times a second by one replica; with shared scraping %s replicas", one.scrapes, strings.Join(shared, " and "))
	if len(own) > 0 {
		out += fmt.Sprintf(", against %s when every replica scrapes it", strings.Join(own, " and "))
	}
	return out + "."
}

// scrapeSourceName names a scrape-load fleet by its metrics source.
var scrapeSourceName = map[string]string{
	"shared-index-default": "every replica scrapes every server (`metrics-data-source`)",
	"shared-scraping":      "shared scraping (`fleet-metrics-data-source`)",
}
