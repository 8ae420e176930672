// dashcheck lints Grafana dashboards (JSON files given as arguments).
//
//  1. Schema: each dashboard is decoded strictly into Grafana's own types (the Grafana
//     Foundation SDK, generated from Grafana's schemas): unknown or misspelled fields,
//     wrong types, missing required fields, panel options and field config per panel
//     plugin, Prometheus query fields.
//  2. The rules of Grafana's dashboard linter (github.com/grafana/dashboard-linter; the Go
//     module proxy does not serve it, so it cannot be installed here), re-implemented under
//     the same rule names. Exclusions come from a `.lint` file beside the dashboards, in the
//     linter's format, each with a reason.
//  3. -promql FILE writes every panel query and variable query (template variables
//     substituted as Grafana would) as a Prometheus rule file, so that
//     `promtool check rules FILE` parses each with Prometheus' real PromQL parser (the
//     linter's target-promql-rule and template-label-promql-rule).
//
// Exit status 1 on any finding that is not excluded.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"sigs.k8s.io/yaml"
)

// The dashboard linter's exclusion file: rule name -> reason.
type lintFile struct {
	Exclusions map[string]struct {
		Reason string `json:"reason"`
	} `json:"exclusions"`
}

// Loose views of the JSON for the rules (the typed decode is the schema check).
type target struct {
	Expr       string          `json:"expr"`
	Datasource json.RawMessage `json:"datasource"`
}

type panel struct {
	ID          int             `json:"id"`
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Datasource  json.RawMessage `json:"datasource"`
	Targets     []target        `json:"targets"`
	Panels      []panel         `json:"panels"`
	GridPos     struct {
		X int `json:"x"`
		Y int `json:"y"`
		W int `json:"w"`
		H int `json:"h"`
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource json.RawMessage `json:"datasource"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
	Refresh    int             `json:"refresh"`
}

type dash struct {
	Title      string  `json:"title"`
	Editable   bool    `json:"editable"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type finding struct{ rule, where, msg string }

// Units Grafana knows for the panels the units rule covers (a subset of Grafana's unit
// ids: the ones a Courier dashboard can need). An unknown id renders as a bare number.
var knownUnits = map[string]bool{
	"none": true, "short": true, "percent": true, "percentunit": true,
	"s": true, "ms": true, "µs": true, "ns": true, "dtdurations": true,
	"bytes": true, "decbytes": true, "bits": true,
	"ops": true, "reqps": true, "rps": true, "wps": true, "cps": true,
	"bool": true, "bool_on_off": true,
}

var unitPanels = map[string]bool{"timeseries": true, "stat": true, "gauge": true, "bargauge": true}

func main() {
	promqlOut := flag.String("promql", "", "write every query as a Prometheus rule file here (for promtool check rules)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: dashcheck [-promql FILE] DASHBOARD.json...")
		os.Exit(2)
	}
	plugins.RegisterDefaultPlugins()

	var findings []finding
	var exprs []string
	excluded := map[string]string{}
	for _, path := range flag.Args() {
		lf := filepath.Join(filepath.Dir(path), ".lint")
		if b, err := os.ReadFile(lf); err == nil {
			var l lintFile
			if err := yaml.UnmarshalStrict(b, &l); err != nil {
				fatal("%s: %v", lf, err)
			}
			for rule, e := range l.Exclusions {
				if strings.TrimSpace(e.Reason) == "" {
					findings = append(findings, finding{"lint-file", lf, "exclusion of " + rule + " without a reason"})
				}
				excluded[rule] = e.Reason
			}
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			fatal("%v", err)
		}
		f, e := check(path, raw)
		findings = append(findings, f...)
		exprs = append(exprs, e...)
	}

	bad := 0
	for _, f := range findings {
		if _, ok := excluded[f.rule]; ok {
			continue
		}
		bad++
		fmt.Printf("%s: [%s] %s\n", f.where, f.rule, f.msg)
	}
	rules := make([]string, 0, len(excluded))
	for r := range excluded {
		rules = append(rules, r)
	}
	sort.Strings(rules)
	for _, r := range rules {
		fmt.Printf("excluded %s: %s\n", r, excluded[r])
	}
	if *promqlOut != "" {
		writeRules(*promqlOut, exprs)
	}
	if bad > 0 {
		fmt.Printf("dashcheck: %d finding(s)\n", bad)
		os.Exit(1)
	}
	fmt.Printf("dashcheck: %d dashboard(s) ok (schema and lint rules), %d queries\n", flag.NArg(), len(exprs))
}

func fatal(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "dashcheck: "+format+"\n", a...)
	os.Exit(2)
}

// check returns the findings for one dashboard and its queries (variables substituted).
func check(path string, raw []byte) ([]finding, []string) {
	var out []finding
	add := func(rule, where, format string, a ...any) {
		out = append(out, finding{rule, path + ": " + where, fmt.Sprintf(format, a...)})
	}

	// 1. Grafana's schema, strictly.
	var typed dashboard.Dashboard
	if err := typed.UnmarshalJSONStrict(raw); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			if strings.TrimSpace(line) != "" {
				add("schema", "", "%s", line)
			}
		}
	}

	// 2. The linter's rules.
	var d dash
	if err := json.Unmarshal(raw, &d); err != nil {
		add("schema", "", "not JSON: %v", err)
		return out, nil
	}
	if d.Editable {
		add("uneditable-dashboard", "", "dashboard is editable: a provisioned dashboard should set \"editable\": false")
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v, ok := vars["datasource"]; !ok || v.Type != "datasource" || strings.Trim(string(v.Query), `"`) != "prometheus" {
		add("template-datasource-rule", "templating", "needs a variable `datasource` of type datasource, query prometheus")
	}
	for _, name := range []string{"job", "instance"} {
		rule := "template-" + name + "-rule"
		v, ok := vars[name]
		if !ok {
			add(rule, "templating", "no `%s` variable", name)
			continue
		}
		if v.Type != "query" || !v.Multi || !v.IncludeAll {
			add(rule, "templating", "`%s` must be a multi-value query variable with All", name)
		}
		if !isDatasourceVar(v.Datasource) {
			add(rule, "templating", "`%s` must query the ${datasource} variable", name)
		}
	}
	var exprs []string
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		if v.Refresh != 2 {
			add("template-on-time-change-reload-rule", "variable "+v.Name, "refresh is %d: use 2 (on time range change)", v.Refresh)
		}
		q := variableQuery(v.Query)
		if sel, ok := labelValuesSelector(q); ok {
			exprs = append(exprs, substitute(sel))
		} else {
			add("template-label-promql-rule", "variable "+v.Name, "query %q is not label_values(selector, label)", q)
		}
	}
	// Not one of the linter's rules: a panel added by hand must not hide another, nor
	// reuse an id (Grafana then shows one of them only).
	all := flatten(d.Panels)
	for i, a := range all {
		for _, b := range all[i+1:] {
			if a.ID == b.ID {
				add("courier-layout", fmt.Sprintf("panel %d", a.ID), "id used by %q and %q", a.Title, b.Title)
			}
			ga, gb := a.GridPos, b.GridPos
			if ga.X < gb.X+gb.W && gb.X < ga.X+ga.W && ga.Y < gb.Y+gb.H && gb.Y < ga.Y+ga.H {
				add("courier-layout", fmt.Sprintf("panel %d %q", b.ID, b.Title), "overlaps panel %d %q", a.ID, a.Title)
			}
		}
		if a.GridPos.W <= 0 || a.GridPos.H <= 0 || a.GridPos.X+a.GridPos.W > 24 {
			add("courier-layout", fmt.Sprintf("panel %d %q", a.ID, a.Title), "gridPos %+v outside the 24-column grid", a.GridPos)
		}
	}
	for _, p := range all {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if p.Type == "row" {
			continue
		}
		if strings.TrimSpace(p.Title) == "" || strings.TrimSpace(p.Description) == "" {
			add("panel-title-description-rule", where, "panel needs a title and a description")
		}
		if !isDatasourceVar(p.Datasource) {
			add("panel-datasource-rule", where, "datasource %s: use the ${datasource} variable", string(p.Datasource))
		}
		if unitPanels[p.Type] {
			if u := p.FieldConfig.Defaults.Unit; !knownUnits[u] {
				add("panel-units-rule", where, "unit %q: set fieldConfig.defaults.unit (e.g. short, s, ops, bytes, none)", u)
			}
		}
		if len(p.Targets) == 0 {
			add("panel-no-targets-rule", where, "panel has no query")
		}
		for i, t := range p.Targets {
			tw := fmt.Sprintf("%s target %d", where, i)
			if !isDatasourceVar(t.Datasource) {
				add("panel-datasource-rule", tw, "target datasource %s: use the ${datasource} variable", string(t.Datasource))
			}
			for _, m := range rateRange.FindAllStringSubmatch(t.Expr, -1) {
				if m[2] != "$__rate_interval" {
					add("target-rate-interval-rule", tw, "%s(...[%s]): use [$__rate_interval]", m[1], m[2])
				}
			}
			if !strings.Contains(t.Expr, `job=~"$job"`) {
				add("target-job-rule", tw, "no job=~\"$job\" matcher")
			}
			if !strings.Contains(t.Expr, `instance=~"$instance"`) {
				add("target-instance-rule", tw, "no instance=~\"$instance\" matcher")
			}
			exprs = append(exprs, substitute(t.Expr))
		}
	}
	return out, exprs
}

// rate(...[W]) and irate(...[W]), with the window as group 2 (a rate argument's selector
// has no brackets of its own).
var rateRange = regexp.MustCompile(`\b(rate|irate)\([^\[\]]*\[([^\]]*)\]`)

func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

func isDatasourceVar(raw json.RawMessage) bool {
	var ds struct {
		UID string `json:"uid"`
	}
	if json.Unmarshal(raw, &ds) != nil {
		return false
	}
	return ds.UID == "${datasource}" || ds.UID == "$datasource"
}

// variableQuery accepts both forms Grafana stores: a string, or {"query": "..."}.
func variableQuery(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(raw, &o)
	return o.Query
}

var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

func labelValuesSelector(q string) (string, bool) {
	m := labelValues.FindStringSubmatch(q)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// Grafana's values for the variables: All is `.*`, $__rate_interval at least 4 scrapes.
var substitutions = strings.NewReplacer(
	"$__rate_interval", "1m", "$__interval", "15s", "$__range", "1h",
	"${datasource}", "prometheus",
)

var varRef = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)

func substitute(e string) string {
	e = substitutions.Replace(e)
	return varRef.ReplaceAllString(e, ".*")
}

func writeRules(path string, exprs []string) {
	var b strings.Builder
	b.WriteString("# Generated by dashcheck: every dashboard query, for `promtool check rules`.\ngroups:\n  - name: dashboard-queries\n    rules:\n")
	for i, e := range exprs {
		j, _ := json.Marshal(e)
		fmt.Fprintf(&b, "      - record: dashboard:query_%d\n        expr: %s\n", i, j)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		fatal("%v", err)
	}
}
