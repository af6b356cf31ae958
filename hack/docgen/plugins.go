package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// pluginParams are the EPP plugins whose parameters are a Go struct of the
// llmdrouter module, read from its source: the struct is their one declaration
// (name, type, default and meaning in its doc comments), and this table is made
// from it.
var pluginParams = []struct{ section, plugin, file, typ string }{
	{"peer-syncer-parameters", "peer-syncer", "llmdrouter/peersyncer/plugin.go", "Parameters"},
	{"shared-prefix-parameters", "shared-prefix-cache-producer", "llmdrouter/sharedprefix/plugin.go", "Parameters"},
	{"fleet-metrics-parameters", "fleet-metrics-data-source", "llmdrouter/fleetmetrics/plugin.go", "Parameters"},
}

// pluginParametersTable is a table of the fields of typ in file: one row for each
// doc comment, with the JSON names of the fields it documents (fields written
// under one comment share it).
func pluginParametersTable(root, file, typ string) (string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, file), nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return "", err
	}
	var st *ast.StructType
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == typ {
			st, _ = ts.Type.(*ast.StructType)
		}
		return st == nil
	})
	if st == nil {
		return "", fmt.Errorf("%s: no struct %s", file, typ)
	}
	type row struct {
		names, types []string
		goNames      map[string]string // a field's Go name: its parameter's
		doc          string
	}
	var rows []row
	for _, fld := range st.Fields.List {
		if fld.Tag == nil {
			continue
		}
		tag, err := strconv.Unquote(fld.Tag.Value)
		if err != nil {
			return "", fmt.Errorf("%s: %s: %w", file, typ, err)
		}
		name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		doc := strings.Join(strings.Fields(fld.Doc.Text()), " ")
		switch {
		case doc != "":
			rows = append(rows, row{doc: doc, goNames: map[string]string{}})
		case len(rows) == 0:
			return "", fmt.Errorf("%s: %s.%s has no doc comment", file, typ, fld.Names[0].Name)
		}
		r := &rows[len(rows)-1]
		r.names = append(r.names, code(name))
		r.goNames[fld.Names[0].Name] = name
		if t := typeName(fld.Type); !slices.Contains(r.types, t) {
			r.types = append(r.types, t)
		}
	}
	if len(rows) == 0 {
		return "", fmt.Errorf("%s: %s has no parameter", file, typ)
	}
	var b strings.Builder
	b.WriteString("| parameter | type | meaning |\n|---|---|---|\n")
	for _, r := range rows {
		doc := cell(r.doc)
		for goName, name := range r.goNames { // the comment names the field as Go does
			doc = regexp.MustCompile(`\b`+goName+`\b`).ReplaceAllString(doc, code(name))
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", strings.Join(r.names, ", "), strings.Join(r.types, ", "), doc)
	}
	return b.String(), nil
}

// typeName is how the table names a field's type, as the JSON of the plugin's
// configuration writes it.
func typeName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.SelectorExpr:
		if t.Sel.Name == "Duration" {
			return "duration"
		}
		return t.Sel.Name
	case *ast.ArrayType:
		return "list of " + typeName(t.Elt)
	}
	return "value"
}
