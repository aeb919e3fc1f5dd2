/*
 * transport_conformance.h - the checks every transport backend must pass,
 * written only against worker/transport.h. Every rank of a world calls
 * rs_transport_conformance() on its own transport at the same time.
 */
#ifndef RS_TRANSPORT_CONFORMANCE_H
#define RS_TRANSPORT_CONFORMANCE_H

#include "worker/transport.h"

/* Run every check; returns the number that failed (each one printed with the rank). */
int rs_transport_conformance(rs_transport *t);

#endif
