"""Network front ends: UDP and TCP DNS listeners, and the HTTP endpoints."""
