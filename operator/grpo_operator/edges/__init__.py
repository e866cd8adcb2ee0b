"""The operator's I/O edges: the Kubernetes API (`kube`), the Ray Jobs API (`rayjobs`), HTTP scrapes of
miles's and the reward service's gauges (`scrape`), child state read from the API (`childstate`), where
those endpoints are (`endpoints`) and the operator's own metrics (`opmetrics`).
"""
