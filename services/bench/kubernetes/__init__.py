"""``fairshare bench kubernetes`` (``bench.py``): native Jobs bound by Fairshare on a real
Kubernetes control plane with KWOK's nodes, against the API server's own pod-creation rate
measured in the same run. Its objects in Kubernetes (``objects.py``), the stack it runs
(``stack.py``), the watch that times the pods (``watch.py``) and the figures (``figures.py``)."""
