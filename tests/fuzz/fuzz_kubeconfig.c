/*
 * fuzz_kubeconfig.c - libFuzzer target for the YAML subset reader
 * (coordinator/yaml.c) and the kubeconfig reader (coordinator/kubeconfig.c):
 * any bytes are a configuration or a clear error naming the line.
 */
#include "coordinator/kubeconfig.h"
#include "coordinator/yaml.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *j = NULL;
	rs_err e1 = {0}, e2 = {0};
	if (rs_yaml_parse((const char *)data, size, "fuzz.yaml", &j, &e1) != RS_OK) {
		if (!e1.msg[0] || j)
			abort();
	}
	json_decref(j);
	rs_kube_config c;
	if (rs_kube_config_parse((const char *)data, size, "/fuzz/kc", NULL, &c, &e2) == RS_OK) {
		if (!c.server || (strncmp(c.server, "https://", 8) && strncmp(c.server, "http://", 7)))
			abort();
		rs_kube_config_free(&c);
	} else if (!e2.msg[0] || c.server) {
		abort();
	}
	return 0;
}
