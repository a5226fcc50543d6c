#!/usr/bin/env python3
"""Writes the CRD upgrade corpus: one directory per case with old.yaml and new.yaml, and
expected.yaml with the verdict and the change (version, path, kind) each case must report.

Every case starts from the same small CRD (widgets.example.com, v1) and changes one thing, so
that each covers one rule of kcp's schemacompat, OLM's crdify or Kubernetes' structural schemas.
Run it from this directory: python3 generate.py
"""
import copy
import os

import yaml


def base():
    spec = {
        "type": "object",
        "required": ["size"],
        "properties": {
            "size": {"type": "integer", "minimum": 1, "maximum": 100},
            "ratio": {"type": "number"},
            "name": {"type": "string", "minLength": 1, "maxLength": 63, "pattern": "^[a-z]+$"},
            "mode": {"type": "string", "enum": ["Fast", "Slow"]},
            "when": {"type": "string", "format": "date-time"},
            "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10, "x-kubernetes-list-type": "set"},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "required": ["name"],
                                "properties": {"name": {"type": "string"}, "number": {"type": "integer", "format": "int32"}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                         "properties": {"app": {"type": "string"}}},
            "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "template": {"type": "object", "x-kubernetes-embedded-resource": True,
                         "x-kubernetes-preserve-unknown-fields": True},
            "step": {"type": "integer", "multipleOf": 2},
            "note": {"type": "string", "nullable": True},
            "policy": {"type": "string", "default": "Always"},
            "limits": {"type": "object", "maxProperties": 5, "additionalProperties": {"type": "integer"}},
            "replicas": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >= 0", "message": "non-negative"}]},
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "listKind": "WidgetList", "plural": "widgets", "singular": "widget"},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": spec, "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}}},
            }],
        },
    }


def field(crd, name):
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][name]


def spec(crd):
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def v2(crd, served=True, storage=False):
    v = copy.deepcopy(crd["spec"]["versions"][0])
    v["name"] = "v2"
    v["served"] = served
    v["storage"] = storage
    return v


CASES = []


def case(name, verdict, path, kind, version="v1", old=None):
    def register(fn):
        CASES.append((name, verdict, path, kind, version, fn, old))
        return fn
    return register


def setter(name, key, value):
    return lambda c: field(c, name).__setitem__(key, value)


def simple(name, verdict, path, kind, fn, version="v1", old=None):
    case(name, verdict, path, kind, version, old)(fn)


# Properties and required (kcp; OLM "field removed", "required field added").
simple("property-added", "Safe", ".spec.color", "PropertyAdded", lambda c: spec(c)["properties"].__setitem__("color", {"type": "string"}))
simple("property-removed", "Narrowing", ".spec.ratio", "PropertyRemoved", lambda c: spec(c)["properties"].pop("ratio"))
simple("required-added", "Narrowing", ".spec.name", "RequiredAdded", lambda c: spec(c)["required"].append("name"))
simple("required-removed", "Safe", ".spec.size", "RequiredRemoved", lambda c: spec(c).pop("required"))
simple("nested-property-removed", "Narrowing", ".spec.ports[*].number", "PropertyRemoved", lambda c: field(c, "ports")["items"]["properties"].pop("number"))
simple("nested-property-added", "Safe", ".spec.config.x", "PropertyAdded", lambda c: field(c, "config").__setitem__("properties", {"x": {"type": "string"}}), old=lambda c: field(c, "config").__setitem__("x-kubernetes-preserve-unknown-fields", False) or field(c, "config").pop("x-kubernetes-preserve-unknown-fields"))
# Types (kcp; OLM "type changed").
simple("type-integer-to-number", "Safe", ".spec.size", "TypeWidened", setter("size", "type", "number"))
simple("type-number-to-integer", "Narrowing", ".spec.ratio", "TypeNarrowed", setter("ratio", "type", "integer"))
simple("type-string-to-integer", "Breaking", ".spec.mode", "TypeChanged", lambda c: field(c, "mode").update({"type": "integer", "enum": [1, 2]}))
simple("type-object-to-string", "Breaking", ".spec.selector", "TypeChanged", lambda c: spec(c)["properties"].__setitem__("selector", {"type": "string"}))
simple("int-or-string-lost", "Narrowing", ".spec.port", "IntOrStringRemoved", lambda c: spec(c)["properties"].__setitem__("port", {"type": "integer"}))
simple("int-or-string-gained", "Safe", ".spec.size", "IntOrStringAdded", lambda c: spec(c)["properties"].__setitem__("size", {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}], "minimum": 1, "maximum": 100}))
# Format (kcp).
simple("format-changed", "Breaking", ".spec.when", "FormatChanged", setter("when", "format", "date"))
simple("format-removed", "Safe", ".spec.when", "FormatRemoved", lambda c: field(c, "when").pop("format"))
simple("format-added", "Narrowing", ".spec.name", "FormatAdded", setter("name", "format", "hostname"))
simple("format-int32-to-int64", "Safe", ".spec.ports[*].number", "FormatChanged", lambda c: field(c, "ports")["items"]["properties"]["number"].__setitem__("format", "int64"))
# Enums (OLM "enum").
simple("enum-value-added", "Safe", ".spec.mode", "EnumValuesAdded", lambda c: field(c, "mode")["enum"].append("Medium"))
simple("enum-value-removed", "Narrowing", ".spec.mode", "EnumValuesRemoved", lambda c: field(c, "mode")["enum"].remove("Slow"))
simple("enum-added", "Narrowing", ".spec.name", "EnumAdded", setter("name", "enum", ["a", "b"]))
simple("enum-removed", "Safe", ".spec.mode", "EnumRemoved", lambda c: field(c, "mode").pop("enum"))
simple("enum-on-integer", "Narrowing", ".spec.size", "EnumAdded", setter("size", "enum", [1, 2, 3]))
# Bounds (OLM "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties").
simple("minimum-raised", "Narrowing", ".spec.size", "MinimumRaised", setter("size", "minimum", 2))
simple("minimum-lowered", "Safe", ".spec.size", "MinimumLowered", setter("size", "minimum", 0))
simple("maximum-lowered", "Narrowing", ".spec.size", "MaximumLowered", setter("size", "maximum", 50))
simple("maximum-raised", "Safe", ".spec.size", "MaximumRaised", setter("size", "maximum", 1000))
simple("minimum-added", "Narrowing", ".spec.ratio", "MinimumAdded", setter("ratio", "minimum", 0))
simple("exclusive-maximum-added", "Narrowing", ".spec.size", "MaximumLowered", setter("size", "exclusiveMaximum", True))
simple("min-length-raised", "Narrowing", ".spec.name", "MinLengthRaised", setter("name", "minLength", 3))
simple("max-length-lowered", "Narrowing", ".spec.name", "MaxLengthLowered", setter("name", "maxLength", 20))
simple("max-length-raised", "Safe", ".spec.name", "MaxLengthRaised", setter("name", "maxLength", 253))
simple("min-items-added", "Narrowing", ".spec.tags", "MinItemsAdded", setter("tags", "minItems", 1))
simple("max-items-lowered", "Narrowing", ".spec.tags", "MaxItemsLowered", setter("tags", "maxItems", 3))
simple("max-items-removed", "Safe", ".spec.tags", "MaxItemsRemoved", lambda c: field(c, "tags").pop("maxItems"))
simple("min-properties-added", "Narrowing", ".spec.labels", "MinPropertiesAdded", setter("labels", "minProperties", 1))
simple("max-properties-lowered", "Narrowing", ".spec.limits", "MaxPropertiesLowered", setter("limits", "maxProperties", 2))
# multipleOf, pattern (kcp: unsupported).
simple("multiple-of-changed", "Narrowing", ".spec.step", "MultipleOfChanged", setter("step", "multipleOf", 3))
simple("multiple-of-divisor", "Safe", ".spec.step", "MultipleOfChanged", setter("step", "multipleOf", 1))
simple("pattern-changed", "Unknown", ".spec.name", "PatternChanged", setter("name", "pattern", "^[a-z0-9]+$"))
simple("pattern-removed", "Safe", ".spec.name", "PatternRemoved", lambda c: field(c, "name").pop("pattern"))
# Flags.
simple("nullable-removed", "Narrowing", ".spec.note", "NullableRemoved", lambda c: field(c, "note").pop("nullable"))
simple("default-changed", "Breaking", ".spec.policy", "DefaultChanged", setter("policy", "default", "Never"))
simple("default-removed", "Breaking", ".spec.policy", "DefaultRemoved", lambda c: field(c, "policy").pop("default"))
simple("default-added", "Breaking", ".spec.mode", "DefaultAdded", setter("mode", "default", "Fast"))
simple("unique-items-added", "Narrowing", ".spec.tags", "UniqueItemsAdded", setter("tags", "uniqueItems", True))
simple("preserve-unknown-removed", "Narrowing", ".spec.config", "PreserveUnknownFieldsRemoved", lambda c: field(c, "config").pop("x-kubernetes-preserve-unknown-fields"))
simple("embedded-resource-removed", "Breaking", ".spec.template", "EmbeddedResourceChanged", lambda c: field(c, "template").pop("x-kubernetes-embedded-resource"))
simple("list-type-changed", "Breaking", ".spec.tags", "ListTypeChanged", setter("tags", "x-kubernetes-list-type", "atomic"))
simple("list-map-keys-changed", "Breaking", ".spec.ports", "ListMapKeysChanged", setter("ports", "x-kubernetes-list-map-keys", ["name", "number"]))
simple("map-type-changed", "Breaking", ".spec.selector", "MapTypeChanged", lambda c: field(c, "selector").pop("x-kubernetes-map-type"))
simple("map-values-changed", "Breaking", ".spec.labels.*", "TypeChanged", lambda c: field(c, "labels").__setitem__("additionalProperties", {"type": "boolean"}))
simple("map-values-widened", "Safe", ".spec.limits.*", "TypeWidened", lambda c: field(c, "limits").__setitem__("additionalProperties", {"type": "number"}))
simple("any-of-added", "Narrowing", ".spec.selector", "AnyOfChanged", setter("selector", "anyOf", [{"required": ["app"]}]))
simple("cel-rule-added", "Unknown", ".spec.size", "ValidationRuleAdded", setter("size", "x-kubernetes-validations", [{"rule": "self % 2 == 0"}]))
simple("cel-rule-removed", "Safe", ".spec.replicas", "ValidationRuleRemoved", lambda c: field(c, "replicas").pop("x-kubernetes-validations"))
simple("cel-message-changed", "Safe", ".spec.replicas", "ValidationRuleChanged", lambda c: field(c, "replicas")["x-kubernetes-validations"][0].__setitem__("message", "must be >= 0"))
simple("cel-rule-reformatted", "Safe", ".spec.replicas", "ValidationRuleChanged", lambda c: field(c, "replicas")["x-kubernetes-validations"][0].__setitem__("rule", "(self>=0)"))
simple("cel-reason-changed", "Safe", ".spec.replicas", "ValidationRuleChanged", lambda c: field(c, "replicas")["x-kubernetes-validations"][0].__setitem__("reason", "FieldValueForbidden"))
simple("cel-rule-changed", "Unknown", ".spec.replicas", "ValidationRuleAdded", lambda c: field(c, "replicas")["x-kubernetes-validations"][0].__setitem__("rule", "self >= 1"))
# A rule on a node the old schema lacks never runs on objects valid under it: the new node is safe.
simple("cel-rule-added-on-new-node", "Safe", ".spec.color", "PropertyAdded", lambda c: spec(c)["properties"].__setitem__("color", {"type": "string", "x-kubernetes-validations": [{"rule": "self.size() <= 20"}]}))
# A rule on an existing node that reads a new field only behind has(): objects without it pass.
simple("cel-rule-added-guarded-new-field", "Safe", ".spec", "ValidationRuleAdded",
       lambda c: spec(c)["properties"].__setitem__("maxSize", {"type": "integer"})
       or spec(c).__setitem__("x-kubernetes-validations", [{"rule": "!has(self.maxSize) || self.maxSize >= self.size"}]))
simple("cel-rule-added-unguarded-new-field", "Unknown", ".spec", "ValidationRuleAdded",
       lambda c: spec(c)["properties"].__setitem__("maxSize", {"type": "integer"})
       or spec(c).__setitem__("x-kubernetes-validations", [{"rule": "self.maxSize >= self.size"}]))
simple("cel-rule-added-existing-field", "Unknown", ".spec", "ValidationRuleAdded",
       lambda c: spec(c).__setitem__("x-kubernetes-validations", [{"rule": "self.size <= 50"}]))
simple("description-only", "Safe", None, None, setter("size", "description", "How big."))
# CRD level (OLM "scope", "storedVersionRemoval", served versions).
simple("scope-changed", "Breaking", ".spec.scope", "ScopeChanged", lambda c: c["spec"].__setitem__("scope", "Cluster"), version=None)
simple("version-added", "Safe", ".spec.versions[v2]", "VersionAdded", lambda c: c["spec"]["versions"].append(v2(c)), version="v2")
simple("stored-version-removed", "Breaking", ".spec.versions[v1]", "StoredVersionRemoved",
       lambda c: c["spec"].__setitem__("versions", [v2(c, storage=True)]))
simple("served-version-removed", "Breaking", ".spec.versions[v2]", "VersionRemoved",
       lambda c: c["spec"]["versions"].pop(), version="v2", old=lambda c: c["spec"]["versions"].append(v2(c)))
simple("stored-version-removed-status", "Breaking", ".spec.versions[v1]", "StoredVersionRemoved",
       lambda c: c["spec"]["versions"].pop(0),
       old=lambda c: c["spec"]["versions"][0].update({"served": False, "storage": False}) or c["spec"]["versions"].append(v2(c, storage=True))
       or c.__setitem__("status", {"storedVersions": ["v1", "v2"]}))
simple("unserved-version-removed", "Safe", ".spec.versions[v2]", "VersionRemoved",
       lambda c: c["spec"]["versions"].pop(), version="v2", old=lambda c: c["spec"]["versions"].append(v2(c, served=False)))
simple("version-unserved", "Breaking", ".spec.versions[v2].served", "VersionUnserved",
       lambda c: c["spec"]["versions"][1].__setitem__("served", False), version="v2", old=lambda c: c["spec"]["versions"].append(v2(c)))
# A new served version that lacks a field of an existing one (crdify's served-version validator):
# without a conversion webhook, a write through v2 drops .spec.ratio for v1 clients.
simple("served-version-added-narrower", "Breaking", ".spec.versions[v1->v2].spec.ratio", "ServedVersionNarrower",
       lambda c: c["spec"]["versions"].append(v2(c)) or c["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].pop("ratio"),
       version="v2")
simple("status-subresource-removed", "Breaking", ".spec.versions[v1].subresources.status", "SubresourceRemoved",
       lambda c: c["spec"]["versions"][0].pop("subresources"))
simple("scale-subresource-added", "Safe", ".spec.versions[v1].subresources.scale", "SubresourceAdded",
       lambda c: c["spec"]["versions"][0]["subresources"].__setitem__("scale", {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}))
simple("group-changed", "Breaking", ".spec.group", "GroupChanged", lambda c: c["spec"].__setitem__("group", "example.org"), version=None)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    expected = []
    for name, verdict, path, kind, version, fn, old_fn in CASES:
        old = base()
        if old_fn:
            old_fn(old)
        new = copy.deepcopy(old)
        fn(new)
        d = os.path.join(here, name)
        os.makedirs(d, exist_ok=True)
        for file, crd in (("old.yaml", old), ("new.yaml", new)):
            with open(os.path.join(d, file), "w") as f:
                yaml.safe_dump(crd, f, sort_keys=False)
        entry = {"name": name, "verdict": verdict}
        if path is not None:
            entry["change"] = {"path": path, "kind": kind}
            if version is not None:
                entry["change"]["version"] = version
        expected.append(entry)
    with open(os.path.join(here, "expected.yaml"), "w") as f:
        f.write("# Generated by generate.py: the verdict (and one change) flotilla-negotiator compat must\n"
                "# report for each old.yaml/new.yaml pair. Verdicts: Safe, Narrowing, Breaking, Unknown.\n")
        yaml.safe_dump(expected, f, sort_keys=False)
    print(f"{len(expected)} cases")


if __name__ == "__main__":
    main()
