# packaging/package.cmake — what an install adds beyond the program and its
# Lua tree (CMakeLists.txt), and the Debian package: `cpack -G DEB` in the
# build directory makes sgw_<version>_<arch>.deb.
#
# The operator's configuration file goes to <sysconfdir>/sgw/sgw.conf: under the
# prefix for `cmake --install --prefix DIR`, /etc/sgw/sgw.conf in the package
# (a conffile, so upgrades keep the operator's edits). The systemd unit goes
# to lib/systemd/system under the prefix, /lib/systemd/system in the package.
# Where those go is decided at install time, when the prefix is known.
install(CODE "
  if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
    set(sgw_etc /etc/sgw)
    set(sgw_units /lib/systemd/system)
  else()
    set(sgw_etc \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_SYSCONFDIR}/sgw\")
    set(sgw_units \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\")
  endif()
  # file(INSTALL puts DESTDIR (the package staging) in front itself.
  file(INSTALL \"${CMAKE_SOURCE_DIR}/packaging/sgw.conf\" DESTINATION \"\${sgw_etc}\")
  file(INSTALL \"${CMAKE_SOURCE_DIR}/packaging/sgw.service\" DESTINATION \"\${sgw_units}\")
")

set(CPACK_PACKAGE_NAME sgw)
set(CPACK_PACKAGE_VERSION 0.1.0)
set(CPACK_PACKAGE_CONTACT "sgw maintainers <sgw@example.com>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "multi-tenant gateway to publish to and moderate Facebook Pages and Instagram accounts")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Staged with DESTDIR under the /usr prefix, so that the rule above puts the
# configuration in /etc and the unit in /lib/systemd/system.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_SOURCE_DIR}/packaging/conffiles)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
include(CPack)
