// Command kstatus prints the readiness verdict that GitOps tools (Flux, kpt, cli-utils' kapply)
// compute for Kubernetes objects with sigs.k8s.io/cli-utils/pkg/kstatus: Current, InProgress,
// Failed, Terminating, NotFound or Unknown, one line per object:
//
//	<Kind>/<name> <status> <message>
//
// The objects are read as JSON from standard input: one object, or a List (kubectl get -o json).
// hack/build-tools.sh builds it into the tool cache; Flotilla's end-to-end tests ask it what a
// GitOps tool would make of the hub's objects.
package main

import (
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading standard input: %v", err)
	}
	// Kubernetes' JSON decoding: whole numbers become int64, as kstatus reads them.
	var object unstructured.Unstructured
	if err := json.Unmarshal(data, &object.Object); err != nil {
		fail("standard input is not a JSON object: %v", err)
	}
	objects := []unstructured.Unstructured{object}
	if object.IsList() {
		list, err := object.ToList()
		if err != nil {
			fail("reading the list: %v", err)
		}
		objects = list.Items
	}
	for i := range objects {
		o := &objects[i]
		result, err := status.Compute(o)
		if err != nil {
			fail("%s/%s: %v", o.GetKind(), o.GetName(), err)
		}
		fmt.Printf("%s/%s %s %s\n", o.GetKind(), o.GetName(), result.Status, result.Message)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kstatus: "+format+"\n", args...)
	os.Exit(2)
}
