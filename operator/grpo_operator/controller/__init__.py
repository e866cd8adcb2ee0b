"""The controller: settings (`config`), one reconcile of a run (`reconciler`) and the kopf handlers that
trigger it (`handlers`). The only place the pure core meets the edges.
"""
