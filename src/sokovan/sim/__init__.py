"""The what-if simulator (CONTRACT section 16): a trace of the cluster's own sessions and agents
(`trace`, exported by `export`, or made up by `synthetic`) replayed through the real placement
pipeline on a virtual clock (`engine`, over the state `cluster` keeps), once per policy
combination (`runs`), measured (`metrics`) and drawn (`report_html`).

docs/trace-format.md describes the trace; docs/scheduling.md, "The what-if simulator", the rest.
"""
