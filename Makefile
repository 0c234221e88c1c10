# libhipfile as a system library: build, install, uninstall, package.
#
#   make                                   build (cargo, release) and link libhipfile.so.$(VERSION)
#   make install [PREFIX=/usr/local] [DESTDIR=]   build if cargo is here, then install
#   make uninstall [PREFIX=...] [DESTDIR=]        remove exactly what install put there
#   make dist                              target/dist: a tarball of the install tree, and a .deb
#
# The installed tree: lib/libhipfile.so.$(VERSION) (+ .so.0, .so links), lib/libhipfile.a,
# include/hipfile.h and hipfile-api-trace.h, lib/pkgconfig/hipfile.pc,
# lib/cmake/hipfile/hipfile-config.cmake (+ version file; imported target hip::hipfile),
# the tools in TOOLS that the build produced, in bin/, the cuFile front
# lib/hipfile-cufile/libcufile.so.0 (+ .so link) and libhipfile's GDS probe helper
# lib/hipfile/hipfile-gds-probe.

CARGO ?= cargo
CC ?= cc
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR ?= $(PREFIX)/bin
CMAKEDIR ?= $(LIBDIR)/cmake/hipfile
# hipfile-rs's libcufile.so.0 goes into a directory of its own, off the loader's search
# path, so that it never stands in for NVIDIA's libcufile by accident: a program runs on
# it only when LD_LIBRARY_PATH names this directory (README, docs/cufile.md).
CUFILEDIR ?= $(LIBDIR)/hipfile-cufile
# libhipfile looks for its GDS probe helper in <its own directory>/hipfile/
# (gds/src/select.rs, helper_candidates).
PROBEDIR ?= $(LIBDIR)/hipfile
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DATADIR ?= $(PREFIX)/share
MANIFEST = $(DATADIR)/hipfile/install-manifest
DESTDIR ?=
# Run after installing into the live system, so the loader's cache knows libhipfile.so.0
# (/usr/local/lib is searched through the cache only). `make install LDCONFIG=true` skips it.
LDCONFIG ?= ldconfig
# Programs installed when the build produced them (a name with no binary is skipped).
TOOLS ?= hipfile-bench ais-stats hipfile-check

TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)
OUT := $(TARGET_DIR)/release
DIST := $(TARGET_DIR)/dist

# The workspace version (Cargo.toml [workspace.package]) names the library file.
VERSION := $(shell sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml)
MAJOR := $(firstword $(subst ., ,$(VERSION)))
SONAME := libhipfile.so.$(MAJOR)
REALNAME := libhipfile.so.$(VERSION)

# What the Rust static library needs from the system (rustc --print native-static-libs);
# also the Libs.private of hipfile.pc, for programs that link libhipfile.a.
NATIVE_LIBS := -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
API := $(shell sed -n 's/^ *\(hipFile[A-Za-z0-9_]*\);$$/\1/p' ffi/libhipfile.map)

.PHONY: all build install install-files uninstall dist deb check-install clean

all: build

, := ,

# Symbol versions: rustc links every cdylib with its own version script, an anonymous
# `{ global: <exports>; local: *; }`, and GNU ld refuses to combine an anonymous version
# node with a named one ("anonymous version tag cannot be combined with other version
# tags"); lld keeps rustc's anonymous node for names both scripts list. So cargo's
# target/release/libhipfile.so carries no versions, and the library we install is linked
# here instead, by the C compiler, from libhipfile.a (the same objects, rustc's own link
# options) with ffi/libhipfile.map. --require-defined pulls exactly the API's objects out of
# the archive (and fails if one is missing), where --whole-archive would drag in all of std.
# The libraries and tools are built last, without the bench: hipfile-bench turns on the
# engine's `testing` feature (its GPU test double), which a build of both in one cargo call
# would unify into libhipfile and libcufile; cargo's last build of a crate is what
# target/release/ holds.
build:
	@if command -v $(CARGO) >/dev/null 2>&1; then \
	  $(CARGO) build --release -p hipfile-bench && \
	  $(CARGO) build --release -p hipfile-ffi -p hipfile-cufile -p hipfile-gds -p ais-stats -p hipfile-check; \
	elif [ -f $(OUT)/libhipfile.a ]; then \
	  echo "$(CARGO) not found: using the existing build in $(OUT)"; \
	else \
	  echo "$(CARGO) not found and nothing built in $(OUT): run make as a user with a Rust toolchain first" >&2; exit 1; \
	fi
	@echo "$(CC) -shared -o $(OUT)/$(REALNAME) -Wl,--version-script=ffi/libhipfile.map ... $(OUT)/libhipfile.a"
	@$(CC) -shared -o $(OUT)/$(REALNAME) -Wl,-soname,$(SONAME) \
	  -Wl,--version-script=ffi/libhipfile.map $(addprefix -Wl$(,)--require-defined=,$(API)) \
	  -Wl,--gc-sections -Wl,--as-needed -Wl,--eh-frame-hdr -Wl,-O1 \
	  -Wl,-z,relro,-z,now -Wl,-z,noexecstack \
	  $(OUT)/libhipfile.a $(NATIVE_LIBS)
	ln -sf $(REALNAME) $(OUT)/$(SONAME)

# sed script that fills the @...@ fields of packaging/*.in for the prefix being installed.
define SUBST
sed -e 's|@VERSION@|$(VERSION)|g' -e 's|@MAJOR@|$(MAJOR)|g' \
    -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
    -e 's|@REALNAME@|$(REALNAME)|g' -e 's|@SONAME@|$(SONAME)|g' \
    -e 's|@NATIVE_LIBS@|$(NATIVE_LIBS)|g' \
    -e "s|@CMAKE_TO_PREFIX@|$$(realpath -m --relative-to=$(CMAKEDIR) $(PREFIX))|g" \
    -e "s|@PREFIX_TO_LIBDIR@|$$(realpath -m --relative-to=$(PREFIX) $(LIBDIR))|g" \
    -e "s|@PREFIX_TO_INCLUDEDIR@|$$(realpath -m --relative-to=$(PREFIX) $(INCLUDEDIR))|g"
endef

install: build
	@$(MAKE) --no-print-directory install-files

# The install steps alone, from what `make` built (dist and deb use it on staging trees).
# Every path written is listed in $(MANIFEST), which uninstall follows.
install-files:
	@set -e; m=$(DESTDIR)$(MANIFEST); \
	put() { install -D -m $$1 $$2 $(DESTDIR)$$3; echo $$3 >> $$m.new; echo "  $(DESTDIR)$$3"; }; \
	link() { install -d $(DESTDIR)$$(dirname $$2); ln -sfn $$1 $(DESTDIR)$$2; echo $$2 >> $$m.new; echo "  $(DESTDIR)$$2 -> $$1"; }; \
	install -d $$(dirname $$m); : > $$m.new; \
	$(SUBST) packaging/hipfile.pc.in > $(OUT)/hipfile.pc; \
	$(SUBST) packaging/hipfile-config.cmake.in > $(OUT)/hipfile-config.cmake; \
	$(SUBST) packaging/hipfile-config-version.cmake.in > $(OUT)/hipfile-config-version.cmake; \
	echo "installing into $(DESTDIR)$(PREFIX):"; \
	put 0755 $(OUT)/$(REALNAME) $(LIBDIR)/$(REALNAME); \
	link $(REALNAME) $(LIBDIR)/$(SONAME); \
	link $(SONAME) $(LIBDIR)/libhipfile.so; \
	put 0644 $(OUT)/libhipfile.a $(LIBDIR)/libhipfile.a; \
	put 0644 include/hipfile.h $(INCLUDEDIR)/hipfile.h; \
	put 0644 include/hipfile-api-trace.h $(INCLUDEDIR)/hipfile-api-trace.h; \
	put 0644 $(OUT)/hipfile.pc $(PKGCONFIGDIR)/hipfile.pc; \
	put 0644 $(OUT)/hipfile-config.cmake $(CMAKEDIR)/hipfile-config.cmake; \
	put 0644 $(OUT)/hipfile-config-version.cmake $(CMAKEDIR)/hipfile-config-version.cmake; \
	for t in $(TOOLS); do \
	  if [ -x $(OUT)/$$t ]; then put 0755 $(OUT)/$$t $(BINDIR)/$$t; fi; \
	done; \
	put 0755 $(OUT)/libcufile.so $(CUFILEDIR)/libcufile.so.0; \
	link libcufile.so.0 $(CUFILEDIR)/libcufile.so; \
	put 0755 $(OUT)/hipfile-gds-probe $(PROBEDIR)/hipfile-gds-probe; \
	echo $(MANIFEST) >> $$m.new; mv $$m.new $$m
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v $(LDCONFIG) >/dev/null 2>&1; then $(LDCONFIG); fi

# Removes what the manifest lists (without one: the library's own files, no tools), then
# each directory left empty on the way up to the prefix, never the prefix itself.
uninstall:
	@m=$(DESTDIR)$(MANIFEST); \
	if [ -f $$m ]; then list=$$(cat $$m); else \
	  list="$(LIBDIR)/$(REALNAME) $(LIBDIR)/$(SONAME) $(LIBDIR)/libhipfile.so $(LIBDIR)/libhipfile.a \
	    $(INCLUDEDIR)/hipfile.h $(INCLUDEDIR)/hipfile-api-trace.h $(PKGCONFIGDIR)/hipfile.pc \
	    $(CMAKEDIR)/hipfile-config.cmake $(CMAKEDIR)/hipfile-config-version.cmake \
	    $(CUFILEDIR)/libcufile.so.0 $(CUFILEDIR)/libcufile.so $(PROBEDIR)/hipfile-gds-probe"; \
	  echo "no $$m: removing the library's files only"; \
	fi; \
	for f in $$list; do \
	  if [ -e $(DESTDIR)$$f ] || [ -L $(DESTDIR)$$f ]; then rm -f $(DESTDIR)$$f && echo "removed $(DESTDIR)$$f"; fi; \
	done; \
	for f in $$list; do \
	  d=$$(dirname $$f); \
	  while case $$d in $(PREFIX)/*) true;; *) false;; esac && rmdir $(DESTDIR)$$d 2>/dev/null; do d=$$(dirname $$d); done; \
	done
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v $(LDCONFIG) >/dev/null 2>&1; then $(LDCONFIG); fi

# target/dist/hipfile-$(VERSION)-linux-<arch>.tar.gz: the /usr/local install tree
# (unpack with `tar -C / -xzf ...`, then run ldconfig). With dpkg-deb, also
# target/dist/hipfile_$(VERSION)_<arch>.deb: the same files under /usr, the library in
# the multiarch directory, as Debian lays them out. Neither needs a Rust toolchain to use.
dist: build
	rm -rf $(DIST)/stage-tar $(DIST)/stage-deb
	$(MAKE) --no-print-directory install-files PREFIX=/usr/local DESTDIR=$(abspath $(DIST)/stage-tar)
	tar -C $(DIST)/stage-tar --owner=0 --group=0 --numeric-owner -czf \
	  $(DIST)/hipfile-$(VERSION)-linux-$(shell uname -m).tar.gz usr
	@echo "wrote $(DIST)/hipfile-$(VERSION)-linux-$(shell uname -m).tar.gz"
	@if command -v dpkg-deb >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory deb; \
	else \
	  echo "dpkg-deb not found: no .deb"; \
	fi

DEBARCH = $(shell dpkg --print-architecture)
MULTIARCH = $(shell $(CC) -print-multiarch)
deb:
	$(MAKE) --no-print-directory install-files PREFIX=/usr LIBDIR=/usr/lib/$(MULTIARCH) \
	  DESTDIR=$(abspath $(DIST)/stage-deb)
	install -d $(DIST)/stage-deb/DEBIAN
	{ echo "Package: hipfile"; \
	  echo "Version: $(VERSION)"; \
	  echo "Architecture: $(DEBARCH)"; \
	  echo "Maintainer: hipfile-rs developers <hipfile-rs@localhost>"; \
	  echo "Installed-Size: $$(du -sk $(DIST)/stage-deb/usr | cut -f1)"; \
	  echo "Depends: libc6 (>= 2.34), libgcc-s1"; \
	  echo "Section: libs"; \
	  echo "Priority: optional"; \
	  echo "Description: GPU-direct file I/O: the hipFile C API over io_uring"; \
	  echo " libhipfile.so.$(MAJOR) (cuFile-compatible semantics), its headers, pkg-config"; \
	  echo " and CMake files (hip::hipfile), the hipfile tools, and a libcufile.so.0 that"; \
	  echo " runs cuFile programs on the same engine (opt in with LD_LIBRARY_PATH)."; \
	} > $(DIST)/stage-deb/DEBIAN/control
	echo "activate-noawait ldconfig" > $(DIST)/stage-deb/DEBIAN/triggers
	dpkg-deb --root-owner-group -Zgzip --build $(DIST)/stage-deb $(DIST)/hipfile_$(VERSION)_$(DEBARCH).deb

# Installs into a temporary prefix, builds and runs examples/ against it (CMake and
# pkg-config), checks the exported symbols, uninstalls and checks nothing is left.
check-install:
	bash scripts/check-install.sh

clean:
	$(CARGO) clean
