package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podConfig is an EPP configuration with pod peer discovery of the pods labelled
// app=epp, served on debugAddress.
func podConfig(debugAddress string) string {
	return fmt.Sprintf(`apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: queue-scorer
  - name: peers
    type: pod-peer-discovery
    parameters:
      selector: app=epp
      debugAddress: %q
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: queue-scorer
dataLayer:
  peerDiscovery:
    pluginRef: peers
`, debugAddress)
}

// writePod creates or updates the pod of replica r, labelled app=epp, with its IP
// and the Ready condition a kubelet would give it.
func writePod(t *testing.T, ns string, r *replica, ready bool) {
	t.Helper()
	ctx := context.Background()
	api := env.Clientset.CoreV1().Pods(ns)
	p, err := api.Get(ctx, r.Pod, metav1.GetOptions{})
	if err != nil {
		if p, err = api.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: r.Pod, Labels: map[string]string{"app": "epp"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "epp", Image: "epp"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: r.IP, PodIPs: []corev1.PodIP{{IP: r.IP}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}
	if _, err := api.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestRealEPPPodPeerDiscovery: three replicas of the real EPP with
// pod-peer-discovery (the type the seam gives the pod source); each replica's peer
// set is exactly the other two pods, and a pod that turns not ready leaves the
// others' peer sets.
func TestRealEPPPodPeerDiscovery(t *testing.T) {
	ns, err := env.CreateNamespace(context.Background(), "llmdpods", nil)
	if err != nil {
		t.Fatal(err)
	}
	rs := startEPPs(t, ns, 3, func(r *replica) string { return podConfig(r.Debug) })
	all := []int{0, 1, 2}
	for _, r := range rs {
		writePod(t, ns, r, true)
	}
	took := waitViews(t, "three replicas", 90*time.Second, rs, all, func(i int) string { return want(rs, i, nil) })
	t.Logf("every replica listed the other two %s after the pods were written", took.Round(time.Millisecond))
	writePod(t, ns, rs[2], false)
	left := waitViews(t, "replica 2 not ready", 10*time.Second, rs, []int{0, 1}, func(i int) string { return want(rs, i, nil, 0, 1) })
	t.Logf("a pod that turned not ready left the others' peer sets within %s", left.Round(time.Millisecond))
}
