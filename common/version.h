/*
 * version.h - rowshift's version: what the binaries report (the
 * coordinator's User-Agent to the Kubernetes API) and the Helm chart's
 * appVersion (helm/rowshift/Chart.yaml; tests/integration/k8s_manifests.sh
 * checks they agree).
 */
#ifndef RS_VERSION_H
#define RS_VERSION_H

#define RS_VERSION "0.1.0"

#endif
