"""The API's writes, one module per resource as the routes are: :mod:`.workloads` (submit,
cancel), :mod:`.budgets` (create, close, weight), :mod:`.members` (grant, revoke),
:mod:`.groups` (bind and unbind Kubernetes namespaces and Slurm accounts), :mod:`.prices` and
:mod:`.cordons`; job arrays are :mod:`services.api.arrays`. Each is a plain function with no
HTTP in it, working on :class:`services.api.application.Application`.

Every write follows one path, written once in :mod:`.skeleton`: the view must have read the
log (else :class:`~services.api.errors.Unavailable`), the request is checked against the
state (:class:`~services.api.errors.Invalid`, :class:`~services.api.errors.NotFound`), the
caller authorised (:class:`~services.api.errors.Forbidden`), conflicts refused
(:class:`~services.api.errors.Conflict`); only then is the event published and flushed
(:class:`~services.api.errors.Unavailable` if the log did not take it: the client retries the
same request, which is idempotent), and the write waits, bounded, until the view has folded it
(read-your-writes). Nothing refused is ever published. The result says whether anything
changed, so the HTTP layer can pick its status code; the errors are mapped to HTTP once, in
:mod:`services.api.app`.
"""
