import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import {
  ApiextensionsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  RbacAuthorizationV1Api,
  ApiException,
} from "@kubernetes/client-node";
import { kubeConfig, kubeConfigForToken, kubeNamespace, uniqueName } from "../support/testbed.ts";

async function waitEstablished(ext: ApiextensionsV1Api, name: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const crd = await ext.readCustomResourceDefinition({ name });
    if (crd.status?.conditions?.some((c) => c.type === "Established" && c.status === "True")) return;
    await sleep(100);
  }
  throw new Error(`CRD ${name} not Established after 10 s`);
}

test("kube-apiserver: a CRD is established and a custom resource round-trips", async (t) => {
  const namespace = await kubeNamespace(t);
  const kc = kubeConfig();
  const ext = kc.makeApiClient(ApiextensionsV1Api);
  const group = `${uniqueName("smoke")}.test.dfe.io`;
  const name = `widgets.${group}`;
  await ext.createCustomResourceDefinition({
    body: {
      metadata: { name },
      spec: {
        group,
        scope: "Namespaced",
        names: { plural: "widgets", singular: "widget", kind: "Widget" },
        versions: [
          {
            name: "v1",
            served: true,
            storage: true,
            schema: {
              openAPIV3Schema: {
                type: "object",
                properties: { spec: { type: "object", properties: { size: { type: "integer", minimum: 1 } } } },
              },
            },
          },
        ],
      },
    },
  });
  t.after(() => ext.deleteCustomResourceDefinition({ name }).then(() => undefined));
  await waitEstablished(ext, name);

  const custom = kc.makeApiClient(CustomObjectsApi);
  const ref = { group, version: "v1", namespace, plural: "widgets" };
  await custom.createNamespacedCustomObject({
    ...ref,
    body: { apiVersion: `${group}/v1`, kind: "Widget", metadata: { name: "w1" }, spec: { size: 3 } },
  });
  const got = (await custom.getNamespacedCustomObject({ ...ref, name: "w1" })) as { spec: { size: number } };
  assert.equal(got.spec.size, 3);
  // The schema is enforced by the real apiserver, not by the client.
  await assert.rejects(
    custom.createNamespacedCustomObject({
      ...ref,
      body: { apiVersion: `${group}/v1`, kind: "Widget", metadata: { name: "w2" }, spec: { size: 0 } },
    }),
    (e: unknown) => e instanceof ApiException && e.code === 422,
  );
});

test("kube-apiserver: a TokenRequest token does what RBAC grants and is refused the rest", async (t) => {
  const namespace = await kubeNamespace(t);
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: "smoke" } } });
  await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: "allowed" }, data: { a: "1" } } });
  await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: "other" }, data: { b: "2" } } });
  await rbac.createNamespacedRole({
    namespace,
    body: {
      metadata: { name: "smoke" },
      rules: [{ apiGroups: [""], resources: ["configmaps"], resourceNames: ["allowed"], verbs: ["get"] }],
    },
  });
  await rbac.createNamespacedRoleBinding({
    namespace,
    body: {
      metadata: { name: "smoke" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "smoke" },
      subjects: [{ kind: "ServiceAccount", name: "smoke", namespace }],
    },
  });
  const tr = await core.createNamespacedServiceAccountToken({
    name: "smoke",
    namespace,
    body: { spec: { audiences: [], expirationSeconds: 600 } },
  });
  const token = tr.status?.token;
  assert.ok(token, "TokenRequest returned no token");

  const asSa = kubeConfigForToken(token).makeApiClient(CoreV1Api);
  const forbidden = (e: unknown) => e instanceof ApiException && e.code === 403;
  const cm = await asSa.readNamespacedConfigMap({ namespace, name: "allowed" });
  assert.equal(cm.data?.["a"], "1");
  await assert.rejects(asSa.readNamespacedConfigMap({ namespace, name: "other" }), forbidden);
  await assert.rejects(asSa.listNamespacedSecret({ namespace }), forbidden);
  await assert.rejects(asSa.createNamespacedConfigMap({ namespace, body: { metadata: { name: "x" } } }), forbidden);
});
