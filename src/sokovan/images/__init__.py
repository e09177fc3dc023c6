"""The default kernel images, built from what the machine has and pushed to a local registry.

`sokovan images build` makes `HOST:PORT/shell:latest` (busybox with the usual tools) and
`HOST:PORT/python:3` (the host's Debian python3 with its standard library and the shared libraries
it loads) without an image hub: each image is a `FROM scratch` build whose context holds the host's
files at their own paths. `engine` says where the container engine is and opens a client on it
(the agent's container backend uses the same two functions); `rootfs` gathers a tree of files;
`contexts` turns the two trees into build contexts with a stable content hash; `registry` asks the
registry what a tag already holds; `builder` builds and pushes what changed.
"""
