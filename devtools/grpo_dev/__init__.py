"""Development tooling for grpo-operator; never installed in an image, never imported by product code.

`localcluster` builds and runs a real etcd + kube-apiserver, `localray` a real Ray head on loopback,
`devrun` is `make run`, `fake_miles` the miles test double, `crdgen` writes the CRD from the types.
"""
