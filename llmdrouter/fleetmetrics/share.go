package fleetmetrics

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	sourcemetrics "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/source/metrics"
)

// A message of the source's broadcast is a kind byte and its body.
const (
	// kindShare: one scrape of one server (share).
	kindShare byte = 1
	// kindHeartbeat: nothing but "this replica runs the source and shares"; sent
	// when it has published nothing for a quarter of the TTL (a replica that owns no
	// server is still a member).
	kindHeartbeat byte = 2
)

// heartbeatMessage is a heartbeat: its kind, padded to the least message a
// broadcast carries (peersync's wire takes 4 bytes at least).
var heartbeatMessage = []byte{kindHeartbeat, 0, 0, 0}

// Bounds of what a peer's share may hold.
const (
	// maxServerName bounds a server's ID (a Kubernetes namespace/name and rank).
	maxServerName = 512
	// MaxShareBytes bounds a share: what the families the extractors read take
	// for one server, with room (a vLLM page's core families take under 2 KiB).
	MaxShareBytes = 32 << 10
	// maxAhead is how far ahead of this replica's clock a share's scrape time may
	// be (clock skew between nodes); beyond, the share is a lie and refused.
	maxAhead = 5 * time.Second
)

// share is one scrape of one server, as a replica publishes it: the families the
// extractors read, as the page had them, and when they were read (by the owner's
// clock).
type share struct {
	server    string
	scrapedAt time.Time
	families  sourcemetrics.PrometheusMetricMap
}

// encodeShare is the message of s: kind, the server's ID, the scrape time
// (microseconds since the epoch) and the families in Prometheus' text format.
func encodeShare(s share) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte(kindShare)
	b.Write(binary.AppendUvarint(nil, uint64(len(s.server))))
	b.WriteString(s.server)
	b.Write(binary.AppendVarint(nil, s.scrapedAt.UnixMicro()))
	names := make([]string, 0, len(s.families))
	for name := range s.families {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if _, err := expfmt.MetricFamilyToText(&b, s.families[name]); err != nil {
			return nil, fmt.Errorf("family %s: %w", name, err)
		}
	}
	if b.Len() > MaxShareBytes {
		return nil, fmt.Errorf("%d bytes, over %d: the families kept are too large to share", b.Len(), MaxShareBytes)
	}
	return b.Bytes(), nil
}

// errShare is a share that does not parse: the peer's connection is refused.
var errShare = errors.New("malformed share")

// decodeShare parses the body of a kindShare message (after its kind byte),
// keeping the families of keep alone.
func decodeShare(body []byte, keep map[string]bool) (share, error) {
	n, k := binary.Uvarint(body)
	if k <= 0 || n == 0 || n > maxServerName || uint64(len(body)-k) < n {
		return share{}, fmt.Errorf("%w: server name", errShare)
	}
	s := share{server: string(body[k : k+int(n)])}
	body = body[k+int(n):]
	at, k := binary.Varint(body)
	if k <= 0 {
		return share{}, fmt.Errorf("%w: scrape time", errShare)
	}
	s.scrapedAt = time.UnixMicro(at)
	parser := expfmt.NewTextParser(model.LegacyValidation) // as upstream's metrics source parses a page
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body[k:]))
	if err != nil {
		return share{}, fmt.Errorf("%w: %w", errShare, err)
	}
	s.families = filter(fams, keep)
	return s, nil
}

// filter is the families of fams that keep names.
func filter(fams map[string]*dto.MetricFamily, keep map[string]bool) sourcemetrics.PrometheusMetricMap {
	out := make(sourcemetrics.PrometheusMetricMap, len(keep))
	for name, f := range fams {
		if keep[name] {
			out[name] = f
		}
	}
	return out
}
