package kubeenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// KubeconfigFor writes a kubeconfig file whose user is user in groups,
// authenticated by a client certificate of the Env's CA, and returns its
// path. With user "system:serviceaccount:NS:NAME" the API server's RBAC
// treats it as that ServiceAccount: xlbd run with it has exactly the
// access deploy/kubernetes/rbac.yaml gives.
func (e *Env) KubeconfigFor(t testing.TB, user string, groups ...string) string {
	t.Helper()
	cert, key, err := e.pki.clientCert(user, groups)
	if err != nil {
		t.Fatalf("kubeenv: client certificate for %s: %v", user, err)
	}
	name := strings.NewReplacer(":", "_", "/", "_").Replace(user)
	path := filepath.Join(e.dir, "kubeconfig-"+name)
	if err := e.writeKubeconfig(path, user, cert, key); err != nil {
		t.Fatalf("kubeenv: %v", err)
	}
	return path
}

// Object is one document of a manifest file.
type Object struct {
	File string // the file it came from
	*unstructured.Unstructured
}

// ReadManifests decodes every document of the YAML files, Namespaces
// first (the others may live in them), then in file and document order.
func ReadManifests(files ...string) ([]Object, error) {
	var nss, rest []Object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(string(b)), 4096)
		for {
			var m map[string]any
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if m == nil {
				continue
			}
			o := Object{f, &unstructured.Unstructured{Object: m}}
			if o.GetKind() == "Namespace" {
				nss = append(nss, o)
			} else {
				rest = append(rest, o)
			}
		}
	}
	return append(nss, rest...), nil
}

// Apply creates every object of the manifest files (ReadManifests' order)
// as the admin, with the server's strict field validation, and returns
// them. An object the server refuses (an unknown or misplaced field, say)
// fails t once every object has been tried.
func (e *Env) Apply(t testing.TB, files ...string) []Object {
	t.Helper()
	objs, err := ReadManifests(files...)
	if err != nil {
		t.Fatalf("kubeenv: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(e.Client.Discovery()))
	dyn, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %s: %v", o.File, gvk, err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == "namespace" {
			if o.GetNamespace() == "" {
				t.Errorf("%s: %s %s names no namespace", o.File, gvk.Kind, o.GetName())
			}
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		if _, err := ri.Create(ctx, o.Unstructured, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
			t.Errorf("%s: create %s %s: %v", o.File, gvk.Kind, o.GetName(), err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return objs
}
