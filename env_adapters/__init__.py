"""Sandbox adapters: each turns a kind of sandbox into a farm-servable env.

Namespaces register their env ids with :func:`farm.registry.register` when
imported; :mod:`farm.registry` imports them on first use of the namespace.
"""
