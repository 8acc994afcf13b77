"""Scale-out on Temporal: a run is a workflow, its steps activities on workers sharing the store.

Nothing here is imported by the embedded mode; ``temporalio`` is imported only by the modules
that need it (the worker, the client, the workflow), never by this package's ``__init__``.
"""
