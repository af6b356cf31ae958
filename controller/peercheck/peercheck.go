// Package peercheck verifies from inside a cluster that every replica of an EPP sees
// exactly the other replicas: it lists the EPP Service's EndpointSlices, reads the
// /debug/peers of each replica that the membership counts (the ready ones, or with
// membership alive every one that is not terminating, as the replicas themselves
// count their peers), and compares. The chart's `helm test` hook runs it as
// `epp check-peers`.
package peercheck

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/epp-peer-discovery/epp-peer-discovery/controller/peers"
)

// Options say which Service to check and how long to try.
type Options struct {
	// Service and Namespace name the EPP Service.
	Service, Namespace string
	// PortName is the Service port that serves /debug/peers (http-metrics, or
	// http-peers for the sidecar).
	PortName string
	// Membership is the replicas' own (--epp-peer-membership, EPP_PEER_MEMBERSHIP):
	// which endpoints are replicas whose peer lists must agree. Empty is ready. Under
	// leader election with membership alive only the leader is ready, and every
	// replica lists the standbys.
	Membership peers.Membership
	// Timeout bounds the whole check; Interval is the pause between rounds.
	Timeout, Interval time.Duration
}

// Replica is one endpoint of the Service that the membership counts.
type Replica struct {
	// ID is namespace/name of its Pod.
	ID string
	// URL of its /debug/peers.
	URL string
}

// Replicas returns the ready, not terminating endpoints of slices that refer to a
// Pod, one per Pod, with the URL of /debug/peers on the slice's port named portName,
// ordered by ID: ReplicasOf with membership ready.
func Replicas(sl []discoveryv1.EndpointSlice, portName string) ([]Replica, error) {
	return ReplicasOf(sl, portName, peers.MembershipReady)
}

// ReplicasOf returns the endpoints of slices that refer to a Pod and that membership
// admits (peers.Membership.Admits: unknown readiness is ready), one per Pod, with the
// URL of /debug/peers on the slice's port named portName, ordered by ID.
func ReplicasOf(sl []discoveryv1.EndpointSlice, portName string, membership peers.Membership) ([]Replica, error) {
	seen := map[string]Replica{}
	for _, s := range sl {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		port := int32(0)
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == portName && p.Port != nil {
				port = *p.Port
			}
		}
		for _, ep := range s.Endpoints {
			c := ep.Conditions
			if ep.TargetRef == nil || len(ep.Addresses) == 0 || !membership.Admits(c.Ready == nil || *c.Ready, c.Terminating != nil && *c.Terminating) {
				continue
			}
			if port == 0 {
				return nil, fmt.Errorf("EndpointSlice %s of service %s has no port named %q: peer discovery is not deployed there "+
					"(for a release of llm-d-router's chart: a helm upgrade without the post-renderer removes it; upgrade again with it)",
					s.Name, s.Labels[discoveryv1.LabelServiceName], portName)
			}
			addr, err := netip.ParseAddr(ep.Addresses[0])
			if err != nil {
				return nil, fmt.Errorf("slice %s: %w", s.Name, err)
			}
			ns := ep.TargetRef.Namespace
			if ns == "" {
				ns = s.Namespace
			}
			id := ns + "/" + ep.TargetRef.Name
			if _, ok := seen[id]; !ok {
				seen[id] = Replica{ID: id, URL: "http://" + netip.AddrPortFrom(addr, uint16(port)).String() + "/debug/peers"}
			}
		}
	}
	out := make([]Replica, 0, len(seen))
	for _, r := range seen {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Replica) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Compare checks each replica's document: synced, and its peers exactly the other
// replicas. It returns one line per problem, nil when all agree.
func Compare(replicas []Replica, docs map[string]peers.Document) []string {
	var problems []string
	for _, r := range replicas {
		doc, ok := docs[r.ID]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: no /debug/peers", r.ID))
			continue
		}
		if doc.Synced == nil || !*doc.Synced {
			problems = append(problems, fmt.Sprintf("%s: not synced", r.ID))
		}
		var got, want []string
		for _, p := range doc.Peers {
			got = append(got, p.ID)
		}
		for _, o := range replicas {
			if o.ID != r.ID {
				want = append(want, o.ID)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			problems = append(problems, fmt.Sprintf("%s: peers [%s], want [%s]", r.ID, strings.Join(got, " "), strings.Join(want, " ")))
		}
	}
	return problems
}

// Run checks the Service's replicas every Interval until they all agree (nil) or the
// Timeout passes (an error with the last problems). It reports each round to out.
// Every round sends one request per replica, each with a 2 s timeout.
func Run(ctx context.Context, cs kubernetes.Interface, client *http.Client, o Options, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var last []string
	for round := 1; ; round++ {
		replicas, problems := checkOnce(ctx, cs, client, o)
		if len(problems) == 0 {
			fmt.Fprintf(out, "ok: %d replicas of service %s/%s each list exactly the others (round %d)\n", len(replicas), o.Namespace, o.Service, round)
			return nil
		}
		last = problems
		fmt.Fprintf(out, "round %d: %s\n", round, strings.Join(problems, "; "))
		select {
		case <-ctx.Done():
			return fmt.Errorf("replicas of service %s/%s still disagree after %s: %s", o.Namespace, o.Service, o.Timeout, strings.Join(last, "; "))
		case <-time.After(o.Interval):
		}
	}
}

func checkOnce(ctx context.Context, cs kubernetes.Interface, client *http.Client, o Options) ([]Replica, []string) {
	list, err := cs.DiscoveryV1().EndpointSlices(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + o.Service})
	if err != nil {
		return nil, []string{"listing endpointslices: " + err.Error()}
	}
	replicas, err := ReplicasOf(list.Items, o.PortName, o.Membership)
	if err != nil {
		return nil, []string{err.Error()}
	}
	if len(replicas) == 0 {
		if o.Membership == peers.MembershipAlive {
			return nil, []string{"no replicas (none that is not terminating)"}
		}
		return nil, []string{"no ready replicas"}
	}
	docs := map[string]peers.Document{}
	var problems []string
	for _, r := range replicas {
		doc, err := fetch(ctx, client, r.URL)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", r.ID, err))
			continue
		}
		docs[r.ID] = doc
	}
	return replicas, append(problems, Compare(replicas, docs)...)
}

func fetch(ctx context.Context, client *http.Client, url string) (peers.Document, error) {
	var doc peers.Document
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return doc, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return doc, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return doc, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&doc); err != nil {
		return doc, fmt.Errorf("GET %s: %w", url, err)
	}
	return doc, nil
}

// Flags parses the arguments of `epp check-peers`.
func Flags(args []string) (Options, error) {
	o := Options{}
	fs := flag.NewFlagSet("epp check-peers", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.Service, "service", "", "the EPP Service")
	fs.StringVar(&o.Namespace, "namespace", "", "its namespace")
	fs.StringVar(&o.PortName, "port-name", "http-metrics", "the Service port serving /debug/peers")
	membership := fs.String("membership", string(peers.MembershipReady), "the replicas' peer membership: ready, or alive (also not-ready replicas, e.g. leader-election standbys)")
	fs.DurationVar(&o.Timeout, "timeout", time.Minute, "how long to retry")
	fs.DurationVar(&o.Interval, "interval", 2*time.Second, "pause between rounds")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("check-peers: %w", err)
	}
	m, err := peers.ParseMembership(*membership)
	if err != nil {
		return o, fmt.Errorf("check-peers: --membership: %w", err)
	}
	o.Membership = m
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("check-peers: unexpected argument %q", fs.Arg(0))
	case o.Service == "" || o.Namespace == "":
		return o, fmt.Errorf("check-peers: --service and --namespace are required")
	case o.Timeout <= 0 || o.Interval <= 0:
		return o, fmt.Errorf("check-peers: --timeout and --interval must be positive")
	}
	return o, nil
}
