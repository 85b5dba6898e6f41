"""The API's routes, one router per resource; :func:`services.api.app.create_app` includes
them. Handlers only translate: HTTP in, a call of the read side or of a write, an
answer (and the status code its outcome calls for) out."""
