/*
 * fuzz_exec_credential.c - libFuzzer target for what an exec credential
 * plugin prints (coordinator/kube_exec.c): any bytes are a token with its
 * expiry, or a clear error and nothing.
 */
#include "coordinator/kube_exec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const apis[] = {"client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"};
	for (int i = 0; i < 2; i++) {
		char *tok = NULL;
		double exp = -1;
		rs_err err = {0};
		if (rs_kube_exec_parse((const char *)data, size, apis[i], &tok, &exp, &err) == RS_OK) {
			if (!tok || !*tok || strpbrk(tok, " \r\n\t") || exp < 0)
				abort();
		} else if (tok || !err.msg[0] || exp != 0) {
			abort();
		}
		free(tok);
	}
	return 0;
}
