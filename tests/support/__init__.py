"""What the tests share and no test module holds: servers and clusters to start (helpers,
controller_env, diagnose_env, realk8s), objects and views to build (controller_fakes, …), peers
(knot_conf, kubeproxy_env). A test module imports from here and from fakeapi, never from
another test module."""
