"""What the demo and the tests run against instead of real systems: the example service
(systems of record over HTTP) and the scripted model provider (real wire protocols)."""
