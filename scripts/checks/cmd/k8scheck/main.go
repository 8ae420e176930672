// k8scheck validates rendered Kubernetes manifests (`helm template` output; files given as
// arguments, all of them one namespace's worth of objects).
//
// Schema: each object is decoded strictly into the typed Go structs of its API
// (k8s.io/api, and the Prometheus Operator's monitoring/v1 for ServiceMonitor and
// PrometheusRule): an unknown or misspelled field, a duplicate field, a wrong type or an
// unparseable quantity fails, as the API server's strict field validation would. On top,
// the checks of the API server's validation that matter here (names, label keys and
// values, port names, environment variable names, selectors matching the pod template,
// probes and Services naming a declared port, mounts naming a declared volume, requests
// not above limits). The complete server-side validation lives in k8s.io/kubernetes, which
// is not meant to be imported as a library.
//
// Policy: every pod template passes Pod Security "restricted" (latest), evaluated by
// k8s.io/pod-security-admission, the code the API server's admission runs; plus Courier's
// own rules: no `latest` or untagged image, no service-account token, no service links
// (enableServiceLinks: false), read-only root filesystem, numeric user, memory request and
// limit, pods selected by a NetworkPolicy whose ingress rules name their sources and a
// declared port, terminationGracePeriodSeconds above
// Courier's pipeline.shutdown_grace (read from the rendered courier.toml) plus the time its
// final commit and group leave take.
//
// Across objects (several releases rendered into one stream): no two objects of a kind
// share a name, no Deployment's selector matches another's pods, every Service, PDB and
// ServiceMonitor selects the pods (or Service) of exactly one release.
//
// -rules-dir DIR writes each PrometheusRule's spec as a Prometheus rule file there, for
// `promtool check rules`.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

// Courier's shutdown after shutdown_grace: the final synchronous commit and the group
// leave (bounded at 10 s in src/actors/consumer.rs). The pod must get at least this long
// beyond shutdown_grace.
const shutdownAfterGraceSeconds = 15

type object struct {
	source string // file:document
	kind   string
	name   string
	obj    any
}

type checker struct {
	objects  []object
	problems []string
}

func (c *checker) fail(o object, format string, a ...any) {
	c.problems = append(c.problems, fmt.Sprintf("%s %s/%s: %s", o.source, o.kind, o.name, fmt.Sprintf(format, a...)))
}

func main() {
	rulesDir := flag.String("rules-dir", "", "write each PrometheusRule's groups to DIR/<name>.yml (for promtool)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: k8scheck [-rules-dir DIR] MANIFEST.yaml...")
		os.Exit(2)
	}
	c := &checker{}
	for _, path := range flag.Args() {
		raw, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		c.decode(path, raw)
	}
	c.checkAll()
	if *rulesDir != "" {
		c.writeRules(*rulesDir)
	}
	if len(c.problems) > 0 {
		for _, p := range c.problems {
			fmt.Println(p)
		}
		fmt.Printf("k8scheck: %d problem(s) in %d object(s)\n", len(c.problems), len(c.objects))
		os.Exit(1)
	}
	kinds := map[string]int{}
	for _, o := range c.objects {
		kinds[o.kind]++
	}
	var ks []string
	for k, n := range kinds {
		ks = append(ks, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(ks)
	fmt.Printf("k8scheck: %d object(s) ok (%s): strict schema, Pod Security restricted, Courier's rules\n", len(c.objects), strings.Join(ks, ", "))
}

// decode splits a YAML stream and decodes each document strictly into its typed struct.
func (c *checker) decode(path string, raw []byte) {
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return
		}
		src := fmt.Sprintf("%s#%d", filepath.Base(path), i)
		if err != nil {
			c.problems = append(c.problems, fmt.Sprintf("%s: %v", src, err))
			return
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			c.problems = append(c.problems, fmt.Sprintf("%s: not YAML: %v", src, err))
			continue
		}
		if head.Kind == "" && head.APIVersion == "" {
			continue // an empty document (comments only)
		}
		o := object{source: src, kind: head.Kind, name: head.Metadata.Name}
		var target any
		switch head.APIVersion + "/" + head.Kind {
		case "v1/ConfigMap":
			target = &corev1.ConfigMap{}
		case "v1/Secret":
			target = &corev1.Secret{}
		case "v1/Service":
			target = &corev1.Service{}
		case "v1/ServiceAccount":
			target = &corev1.ServiceAccount{}
		case "apps/v1/Deployment":
			target = &appsv1.Deployment{}
		case "policy/v1/PodDisruptionBudget":
			target = &policyv1.PodDisruptionBudget{}
		case "networking.k8s.io/v1/NetworkPolicy":
			target = &networkingv1.NetworkPolicy{}
		case "monitoring.coreos.com/v1/ServiceMonitor":
			target = &monitoringv1.ServiceMonitor{}
		case "monitoring.coreos.com/v1/PrometheusRule":
			target = &monitoringv1.PrometheusRule{}
		default:
			c.fail(o, "apiVersion %q kind %q: not a kind this checker knows (add it to k8scheck)", head.APIVersion, head.Kind)
			continue
		}
		if err := yaml.UnmarshalStrict(doc, target); err != nil {
			c.fail(o, "schema: %v", err)
			continue
		}
		o.obj = target
		c.objects = append(c.objects, o)
	}
}

func (c *checker) checkAll() {
	seen := map[string]string{}
	for _, o := range c.objects {
		key := o.kind + "/" + o.name
		if prev, ok := seen[key]; ok {
			c.fail(o, "name collides with %s (two releases in one namespace?)", prev)
		}
		seen[key] = o.source
		meta := metaOf(o.obj)
		c.checkMeta(o, meta)
		switch v := o.obj.(type) {
		case *appsv1.Deployment:
			c.checkDeployment(o, v)
		case *corev1.Service:
			c.checkService(o, v)
		case *policyv1.PodDisruptionBudget:
			c.checkPDB(o, v)
		case *networkingv1.NetworkPolicy:
			c.checkNetworkPolicy(o, v)
		case *monitoringv1.ServiceMonitor:
			c.checkServiceMonitor(o, v)
		case *monitoringv1.PrometheusRule:
			if len(v.Spec.Groups) == 0 {
				c.fail(o, "no rule groups")
			}
		case *corev1.ServiceAccount:
			if v.AutomountServiceAccountToken == nil || *v.AutomountServiceAccountToken {
				c.fail(o, "automountServiceAccountToken must be false")
			}
		}
	}
	c.checkSelectorsAcrossReleases()
}

func metaOf(obj any) *metav1.ObjectMeta {
	switch v := obj.(type) {
	case *corev1.ConfigMap:
		return &v.ObjectMeta
	case *corev1.Secret:
		return &v.ObjectMeta
	case *corev1.Service:
		return &v.ObjectMeta
	case *corev1.ServiceAccount:
		return &v.ObjectMeta
	case *appsv1.Deployment:
		return &v.ObjectMeta
	case *policyv1.PodDisruptionBudget:
		return &v.ObjectMeta
	case *networkingv1.NetworkPolicy:
		return &v.ObjectMeta
	case *monitoringv1.ServiceMonitor:
		return &v.ObjectMeta
	case *monitoringv1.PrometheusRule:
		return &v.ObjectMeta
	}
	return &metav1.ObjectMeta{}
}

func (c *checker) checkMeta(o object, m *metav1.ObjectMeta) {
	nameRule := validation.IsDNS1123Subdomain
	if o.kind == "Service" {
		nameRule = validation.IsDNS1035Label
	}
	for _, e := range nameRule(m.Name) {
		c.fail(o, "metadata.name %q: %s", m.Name, e)
	}
	c.checkLabels(o, "metadata.labels", m.Labels)
	for k := range m.Annotations {
		for _, e := range validation.IsQualifiedName(k) {
			c.fail(o, "annotation key %q: %s", k, e)
		}
	}
}

func (c *checker) checkLabels(o object, where string, l map[string]string) {
	for k, v := range l {
		for _, e := range validation.IsQualifiedName(k) {
			c.fail(o, "%s key %q: %s", where, k, e)
		}
		for _, e := range validation.IsValidLabelValue(v) {
			c.fail(o, "%s %s=%q: %s", where, k, v, e)
		}
	}
}

func (c *checker) checkDeployment(o object, d *appsv1.Deployment) {
	if d.Spec.Selector == nil {
		c.fail(o, "spec.selector is required")
		return
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		c.fail(o, "spec.selector: %v", err)
		return
	}
	if sel.Empty() {
		c.fail(o, "spec.selector is empty")
	}
	tmpl := d.Spec.Template
	c.checkLabels(o, "spec.template.metadata.labels", tmpl.Labels)
	if !sel.Matches(labels.Set(tmpl.Labels)) {
		c.fail(o, "spec.selector %s does not match the pod template's labels", sel)
	}
	spec := &tmpl.Spec

	// Pod Security "restricted", as the admission plugin evaluates it.
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		c.fail(o, "pod security evaluator: %v", err)
	} else {
		res := policy.AggregateCheckResults(eval.EvaluatePod(
			psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()},
			&tmpl.ObjectMeta, spec))
		if !res.Allowed {
			c.fail(o, "violates Pod Security \"restricted\": %s", res.ForbiddenDetail())
		}
	}

	// Courier's rules.
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		c.fail(o, "automountServiceAccountToken must be false (Courier calls no Kubernetes API)")
	}
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		c.fail(o, "enableServiceLinks must be false (every Service of the namespace would become environment variables of the process)")
	}
	if !c.ingressPolicySelects(tmpl.Labels) {
		c.fail(o, "no NetworkPolicy with policyTypes Ingress selects the pods")
	}
	if psc := spec.SecurityContext; psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		c.fail(o, "the pod needs a numeric, non-root securityContext.runAsUser")
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		if _, dup := volumes[v.Name]; dup {
			c.fail(o, "volume %q declared twice", v.Name)
		}
		volumes[v.Name] = v
		if v.ConfigMap != nil && c.find("ConfigMap", v.ConfigMap.Name) == nil {
			c.fail(o, "volume %q: ConfigMap %q is not in the rendered objects", v.Name, v.ConfigMap.Name)
		}
	}
	if sa := spec.ServiceAccountName; sa != "" && c.find("ServiceAccount", sa) == nil && c.count("ServiceAccount") > 0 {
		c.fail(o, "serviceAccountName %q is not among the rendered ServiceAccounts", sa)
	}
	if len(spec.Containers) == 0 {
		c.fail(o, "no containers")
	}
	for _, ct := range spec.Containers {
		c.checkContainer(o, ct, volumes)
	}
	c.checkGrace(o, spec, volumes)
}

var imageRef = regexp.MustCompile(`^([^@]+?)(?::([\w][\w.-]{0,127}))?(?:@(sha256:[0-9a-f]{64}))?$`)

func (c *checker) checkContainer(o object, ct corev1.Container, volumes map[string]corev1.Volume) {
	at := "container " + ct.Name
	for _, e := range validation.IsDNS1123Label(ct.Name) {
		c.fail(o, "%s: name: %s", at, e)
	}
	m := imageRef.FindStringSubmatch(ct.Image)
	switch {
	case m == nil:
		c.fail(o, "%s: image %q is not a valid reference", at, ct.Image)
	case m[3] == "" && m[2] == "":
		c.fail(o, "%s: image %q has neither a tag nor a digest (means :latest)", at, ct.Image)
	case m[2] == "latest":
		c.fail(o, "%s: image %q uses the tag latest", at, ct.Image)
	}
	ports := map[string]int32{}
	for _, p := range ct.Ports {
		if p.Name != "" {
			for _, e := range validation.IsValidPortName(p.Name) {
				c.fail(o, "%s: port name %q: %s", at, p.Name, e)
			}
			ports[p.Name] = p.ContainerPort
		}
		for _, e := range validation.IsValidPortNum(int(p.ContainerPort)) {
			c.fail(o, "%s: containerPort %d: %s", at, p.ContainerPort, e)
		}
	}
	for _, e := range ct.Env {
		for _, msg := range validation.IsEnvVarName(e.Name) {
			c.fail(o, "%s: env %q: %s", at, e.Name, msg)
		}
	}
	for name, pr := range map[string]*corev1.Probe{"startupProbe": ct.StartupProbe, "livenessProbe": ct.LivenessProbe, "readinessProbe": ct.ReadinessProbe} {
		if pr == nil {
			c.fail(o, "%s: no %s", at, name)
			continue
		}
		if pr.HTTPGet == nil {
			c.fail(o, "%s: %s is not an HTTP probe", at, name)
			continue
		}
		if p := pr.HTTPGet.Port; p.StrVal != "" {
			if _, ok := ports[p.StrVal]; !ok {
				c.fail(o, "%s: %s names port %q, which the container does not declare", at, name, p.StrVal)
			}
		}
	}
	for _, vm := range ct.VolumeMounts {
		if _, ok := volumes[vm.Name]; !ok {
			c.fail(o, "%s: volumeMount %q names no volume of the pod", at, vm.Name)
		}
	}
	sc := ct.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		c.fail(o, "%s: readOnlyRootFilesystem must be true", at)
	}
	req, lim := ct.Resources.Requests, ct.Resources.Limits
	if req.Memory().IsZero() || lim.Memory().IsZero() {
		c.fail(o, "%s: needs a memory request and a memory limit", at)
	}
	for res, r := range req {
		if l, ok := lim[res]; ok && r.Cmp(l) > 0 {
			c.fail(o, "%s: %s request %s above its limit %s", at, res, r.String(), l.String())
		}
	}
}

// checkGrace compares terminationGracePeriodSeconds with the shutdown_grace of the
// courier.toml in the pod's ConfigMap.
func (c *checker) checkGrace(o object, spec *corev1.PodSpec, volumes map[string]corev1.Volume) {
	var cm *corev1.ConfigMap
	for _, v := range volumes {
		if v.ConfigMap != nil {
			if f := c.find("ConfigMap", v.ConfigMap.Name); f != nil {
				if x, ok := f.obj.(*corev1.ConfigMap); ok && x.Data["courier.toml"] != "" {
					cm = x
				}
			}
		}
	}
	if cm == nil {
		c.fail(o, "no ConfigMap with courier.toml mounted")
		return
	}
	var cfg struct {
		Pipeline map[string]any `toml:"pipeline"`
	}
	if _, err := toml.Decode(cm.Data["courier.toml"], &cfg); err != nil {
		c.fail(o, "ConfigMap %s: courier.toml is not TOML: %v", cm.Name, err)
		return
	}
	grace := 15.0 // Courier's default
	if v, ok := cfg.Pipeline["shutdown_grace"]; ok {
		s, isStr := v.(string)
		d, err := humantimeSeconds(s)
		if !isStr || err != nil {
			c.fail(o, "pipeline.shutdown_grace %v: %v", v, err)
			return
		}
		grace = d
	} else if v, ok := cfg.Pipeline["shutdown_grace_ms"].(int64); ok {
		grace = float64(v) / 1000
	}
	want := int64(grace+0.999) + shutdownAfterGraceSeconds
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds < want {
		got := "unset (30)"
		if spec.TerminationGracePeriodSeconds != nil {
			got = strconv.FormatInt(*spec.TerminationGracePeriodSeconds, 10)
		}
		c.fail(o, "terminationGracePeriodSeconds %s is below pipeline.shutdown_grace (%gs) + %d s (final commit, group leave): want >= %d", got, grace, shutdownAfterGraceSeconds, want)
	}
}

var durationPart = regexp.MustCompile(`(\d+(?:\.\d+)?)\s*([a-z]+)`)

// humantimeSeconds parses the subset of humantime durations Courier's config uses.
func humantimeSeconds(s string) (float64, error) {
	units := map[string]float64{"ns": 1e-9, "nsec": 1e-9, "us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3,
		"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60, "minute": 60,
		"minutes": 60, "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400}
	if strings.TrimSpace(durationPart.ReplaceAllString(s, "")) != "" || !durationPart.MatchString(s) {
		return 0, fmt.Errorf("%q is not a duration", s)
	}
	total := 0.0
	for _, m := range durationPart.FindAllStringSubmatch(s, -1) {
		n, _ := strconv.ParseFloat(m[1], 64)
		u, ok := units[m[2]]
		if !ok {
			return 0, fmt.Errorf("%q: unknown unit %q", s, m[2])
		}
		total += n * u
	}
	return total, nil
}

func (c *checker) deployments() []object {
	var out []object
	for _, o := range c.objects {
		if _, ok := o.obj.(*appsv1.Deployment); ok {
			out = append(out, o)
		}
	}
	return out
}

// podsSelectedBy lists the Deployments whose pod template labels the selector matches.
func (c *checker) podsSelectedBy(sel labels.Selector) []*appsv1.Deployment {
	var out []*appsv1.Deployment
	for _, o := range c.deployments() {
		d := o.obj.(*appsv1.Deployment)
		if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d)
		}
	}
	return out
}

func (c *checker) checkService(o object, s *corev1.Service) {
	if len(s.Spec.Selector) == 0 {
		c.fail(o, "no selector")
		return
	}
	ds := c.podsSelectedBy(labels.SelectorFromSet(s.Spec.Selector))
	if len(ds) != 1 {
		c.fail(o, "selector %v matches the pods of %d Deployments, want exactly 1", s.Spec.Selector, len(ds))
		return
	}
	for _, p := range s.Spec.Ports {
		for _, e := range validation.IsValidPortName(p.Name) {
			c.fail(o, "port name %q: %s", p.Name, e)
		}
		if name := p.TargetPort.StrVal; name != "" && !declaresPort(ds[0], name) {
			c.fail(o, "targetPort %q is not a port of %s's containers", name, ds[0].Name)
		}
	}
}

func declaresPort(d *appsv1.Deployment, name string) bool {
	for _, ct := range d.Spec.Template.Spec.Containers {
		for _, p := range ct.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

func (c *checker) checkPDB(o object, p *policyv1.PodDisruptionBudget) {
	if p.Spec.Selector == nil {
		c.fail(o, "no selector")
		return
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
	if err != nil {
		c.fail(o, "selector: %v", err)
		return
	}
	if n := len(c.podsSelectedBy(sel)); n != 1 {
		c.fail(o, "selector %s matches the pods of %d Deployments, want exactly 1", sel, n)
	}
	if (p.Spec.MaxUnavailable == nil) == (p.Spec.MinAvailable == nil) {
		c.fail(o, "set exactly one of maxUnavailable and minAvailable")
	}
}

// ingressPolicySelects: some NetworkPolicy restricting ingress selects pods with these labels.
func (c *checker) ingressPolicySelects(podLabels map[string]string) bool {
	for _, x := range c.objects {
		np, ok := x.obj.(*networkingv1.NetworkPolicy)
		if !ok {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(podLabels)) {
			continue
		}
		for _, t := range np.Spec.PolicyTypes {
			if t == networkingv1.PolicyTypeIngress {
				return true
			}
		}
	}
	return false
}

func (c *checker) checkNetworkPolicy(o object, np *networkingv1.NetworkPolicy) {
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || sel.Empty() {
		c.fail(o, "podSelector %v: %v (an empty selector applies to every pod of the namespace)", np.Spec.PodSelector, err)
		return
	}
	ds := c.podsSelectedBy(sel)
	if len(ds) != 1 {
		c.fail(o, "podSelector %s matches the pods of %d Deployments, want exactly 1", sel, len(ds))
		return
	}
	types := map[networkingv1.PolicyType]bool{}
	for _, t := range np.Spec.PolicyTypes {
		types[t] = true
	}
	if !types[networkingv1.PolicyTypeIngress] {
		c.fail(o, "policyTypes %v: Ingress must be restricted", np.Spec.PolicyTypes)
	}
	if len(np.Spec.Egress) > 0 && !types[networkingv1.PolicyTypeEgress] {
		c.fail(o, "egress rules without policyTypes Egress are ignored")
	}
	for i, r := range np.Spec.Ingress {
		if len(r.From) == 0 {
			c.fail(o, "ingress[%d] has no `from`: it admits every source", i)
		}
		for j, peer := range r.From {
			if peer.IPBlock == nil && peer.NamespaceSelector == nil && peer.PodSelector == nil {
				c.fail(o, "ingress[%d].from[%d] names no source", i, j)
			}
		}
		if len(r.Ports) == 0 {
			c.fail(o, "ingress[%d] has no ports: it opens every port", i)
		}
		for _, p := range r.Ports {
			if p.Port != nil && p.Port.StrVal != "" && !declaresPort(ds[0], p.Port.StrVal) {
				c.fail(o, "ingress[%d]: port %q is not a port of %s's containers", i, p.Port.StrVal, ds[0].Name)
			}
		}
	}
	for i, r := range np.Spec.Egress {
		if len(r.To) == 0 && len(r.Ports) == 0 {
			c.fail(o, "egress[%d] names neither destinations nor ports: it opens all egress (set egress.restrict false instead)", i)
		}
	}
}

func (c *checker) checkServiceMonitor(o object, sm *monitoringv1.ServiceMonitor) {
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || sel.Empty() {
		c.fail(o, "selector %v: %v (an empty selector scrapes every Service)", sm.Spec.Selector, err)
		return
	}
	var matched []*corev1.Service
	for _, x := range c.objects {
		if s, ok := x.obj.(*corev1.Service); ok && sel.Matches(labels.Set(s.Labels)) {
			matched = append(matched, s)
		}
	}
	if len(matched) != 1 {
		c.fail(o, "selector %s matches %d Services, want exactly 1", sel, len(matched))
		return
	}
	for _, ep := range sm.Spec.Endpoints {
		found := false
		for _, p := range matched[0].Spec.Ports {
			if p.Name == ep.Port {
				found = true
			}
		}
		if !found {
			c.fail(o, "endpoint port %q is not a port of Service %s", ep.Port, matched[0].Name)
		}
	}
	if sm.Spec.JobLabel != "" {
		if _, ok := matched[0].Labels[sm.Spec.JobLabel]; !ok {
			c.fail(o, "jobLabel %q: Service %s has no such label", sm.Spec.JobLabel, matched[0].Name)
		}
	}
}

// Two releases must not select each other's pods.
func (c *checker) checkSelectorsAcrossReleases() {
	for _, o := range c.deployments() {
		d := o.obj.(*appsv1.Deployment)
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			continue
		}
		for _, other := range c.podsSelectedBy(sel) {
			if other != d {
				c.fail(o, "selector %s also matches the pods of Deployment %s", sel, other.Name)
			}
		}
	}
}

func (c *checker) find(kind, name string) *object {
	for i := range c.objects {
		if c.objects[i].kind == kind && c.objects[i].name == name {
			return &c.objects[i]
		}
	}
	return nil
}

func (c *checker) count(kind string) int {
	n := 0
	for _, o := range c.objects {
		if o.kind == kind {
			n++
		}
	}
	return n
}

func (c *checker) writeRules(dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for _, o := range c.objects {
		r, ok := o.obj.(*monitoringv1.PrometheusRule)
		if !ok {
			continue
		}
		out, err := yaml.Marshal(map[string]any{"groups": r.Spec.Groups})
		if err != nil {
			c.fail(o, "cannot write rules: %v", err)
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, r.Name+".yml"), out, 0o644); err != nil {
			c.fail(o, "cannot write rules: %v", err)
		}
	}
}
