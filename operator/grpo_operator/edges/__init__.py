"""The operator's I/O edges: the Kubernetes API (`kube`, remembering what it can in `kubecache`, reading the
watches' copies through `watchcache`), the Ray Jobs API (`rayjobs`, held back per head by `backoff`), HTTP scrapes
of miles's and the reward service's gauges (`scrape`), child state read from the API (`childstate`), where those
endpoints are (`endpoints`) and the operator's own metrics (`opmetrics`). What holds state is made at start and
passed in; nothing here runs at import.
"""
