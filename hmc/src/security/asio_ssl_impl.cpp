// The one translation unit that compiles Asio's SSL implementation (BOOST_ASIO_SEPARATE_COMPILATION:
// runtime/src/asio_impl.cpp compiles the rest of Asio; the runtime layer knows nothing of TLS).
#include <boost/asio/ssl/impl/src.hpp>
